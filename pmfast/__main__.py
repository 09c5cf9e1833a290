"""``python -m pmfast ...`` runs the same command line as ``pmfast ...``."""

from pmfast.cli.app import main

if __name__ == "__main__":
    main()
