"""What every pmfast graph rewriter shares: validated replacements, declined on any failure."""

from __future__ import annotations

import logging

from pytensor.graph.features import ReplaceValidate
from pytensor.graph.rewriting.basic import GraphRewriter


class PassRewriter(GraphRewriter):
    """A ``GraphRewriter`` whose replacements are validated and never break compilation.

    Subclasses implement ``apply`` and hand each candidate to :meth:`attempt`.
    """

    #: recorded as the replacements' reason and used in the debug log
    reason = "pmfast"

    def add_requirements(self, fgraph):
        fgraph.attach_feature(ReplaceValidate())

    def attempt(self, fgraph, build, subject) -> bool:
        """Replace the ``(old, new)`` pairs ``build()`` returns; ``True`` if it did.

        Declined (``False``) if ``build`` returns nothing, a new type differs
        from the old, or anything raises (logged at debug level by the
        subclass's module logger).
        """
        try:
            pairs = build()
            if not pairs or any(old.type != new.type for old, new in pairs):
                return False
            fgraph.replace_all_validate(list(pairs), reason=self.reason)
            return True
        except Exception:
            logging.getLogger(type(self).__module__).debug("%s: declined %s", self.reason, subject, exc_info=True)
            return False
