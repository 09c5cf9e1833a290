"""Model specs: a zoo name with size kwargs (``name:key=val,...``) or ``path/to/file.py[:function]``."""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_FUNCTION = "build_model"
#: Module names under which model files are imported (not importable elsewhere, e.g. on Dask workers).
USER_MODULE_PREFIX = "_pmfast_user_"


class LoadError(ValueError):
    """A model spec that can't be turned into a model; the message is meant for the user."""


@dataclass
class Spec:
    """A parsed model spec: a model file and its function, or a zoo name and its size kwargs."""

    text: str
    path: Path | None = None
    function: str = DEFAULT_FUNCTION
    name: str | None = None
    kwargs: dict = field(default_factory=dict)


def one_line(text) -> str:
    """``text`` with all whitespace runs collapsed, so that messages stay on one line."""
    return " ".join(str(text).split())


def parse_spec(text: str) -> Spec:
    """Parse a model spec; files are recognised by a ``.py`` suffix or a path separator."""
    head, _, tail = text.partition(":")
    if head.endswith(".py") or "/" in head or "\\" in head:
        return Spec(text, path=Path(head), function=tail.strip() or DEFAULT_FUNCTION)
    kwargs = {}
    for item in filter(None, (s.strip() for s in tail.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip().isidentifier():
            raise LoadError(f"bad size argument {item!r} in {text!r}; expected name:key=value,key=value")
        try:
            kwargs[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            kwargs[key.strip()] = value.strip()
    return Spec(text, name=head.strip(), kwargs=kwargs)


def check_spec(text: str) -> Spec:
    """Parse ``text`` and check what can be checked without importing the model."""
    from pmfast import models

    spec = parse_spec(text)
    if spec.path is not None:
        if not spec.path.is_file():
            raise LoadError(f"model file not found: {spec.path}")
    elif spec.name not in models.ZOO:
        raise LoadError(
            f"unknown zoo model {spec.name!r} (see `pmfast models`; a model file must end in .py); "
            f"known: {', '.join(models.ZOO)}"
        )
    return spec


def _failed(what, exc) -> LoadError:
    return LoadError(f"{what} failed: {type(exc).__name__}: {one_line(exc)}")


def _import_file(path: Path):
    name = f"{USER_MODULE_PREFIX}{path.stem}_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise LoadError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    directory = str(path.resolve().parent)
    sys.path.insert(0, directory)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        raise _failed(path, exc) from exc
    finally:
        if directory in sys.path:
            sys.path.remove(directory)
    return module


def load_model(text: str):
    """Build the model a spec names; returns ``(model, initial_point_or_None)``.

    A model function may return a ``pm.Model`` or ``(model, initial_point)``.
    """
    from pmfast import models

    spec = check_spec(text)
    import pymc as pm

    if spec.path is not None:
        build = getattr(_import_file(spec.path), spec.function, None)
        if not callable(build):
            raise LoadError(f"{spec.path} has no function {spec.function!r}")
        what = f"{spec.path}:{spec.function}"
    else:
        try:
            build = models.load(spec.name)
        except Exception as exc:
            raise _failed(spec.name, exc) from exc
        what = spec.name
    try:
        result = build(**spec.kwargs)
    except Exception as exc:
        raise _failed(what, exc) from exc
    initial_point = None
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], pm.Model):
        result, initial_point = result
    if not isinstance(result, pm.Model):
        raise LoadError(
            f"{what} returned {type(result).__name__}, expected a pymc.Model or (model, initial_point)"
        )
    return result, initial_point
