"""pmfast's graph passes and the order they run in.

Pipeline (positions in pytensor's global ``optdb``; stock entries for reference)::

    0     merge
    1     canonicalize
    1.5   stabilize
    1.6   scan_eqopt2 (scan_merge, scan_merge_inouts)
    1.61  scan_save_mem
    2     specialize
    48    add_mul_fusion
    49    elemwise_fusion
    49.5  add_destroy_handler
    50.5  inplace_elemwise
    100   merge3

Each pmfast pass documents where it sits and why at its registration.
"""

from pmfast.passes.registry import (
    ALL,
    NONE,
    PASSES,
    Pass,
    UnknownPassError,
    available,
    fired,
    record,
    register_pass,
    select,
    unregister_pass,
)

__all__ = [
    "ALL",
    "NONE",
    "PASSES",
    "Pass",
    "UnknownPassError",
    "available",
    "fired",
    "record",
    "register_pass",
    "select",
    "unregister_pass",
]
