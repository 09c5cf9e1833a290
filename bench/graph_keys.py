"""Did a change to compile time change what is compiled? The zoo's rewritten graphs, sources and keys, before and after.

    python bench/graph_keys.py [MODEL ...] > after.jsonl        (one line per model; nothing compiled by numba)
        (MODEL: a zoo name at the tests' sizes, a spec ``name:key=val`` or a model file ``DIR/models/NAME.py``)
    python bench/graph_keys.py --compare before*.jsonl -- after*.jsonl

For each model, ``pmfast.compile`` runs up to the entries (graphs, rewrites, node
functions, entry sources and keys) and stops before numba compiles anything. Per
entry (logp, expand) it records the rewritten graph's node count, hashes of the
graph function's source (comments dropped), of the entry's source and its cache
key. Keys are computed with pmfast's version salts (``compile_salt``, in ``pmfast.linker`` and
``pmfast.compiler.salt``, vmath's ``VERSION``, the linear algebra's source hash
``pmfast.compiler.linalg._SOURCE``) set to constants: those hash pmfast's own source files, so any
edit changes them although nothing compiled does.

pytensor's fusion does not always build the same graph from the same model in two
processes (ar2_scan, ordinal, radon_data, two_trace_scan, wide_additive,
student_t_regression vary between runs on unchanged code): run each side a few
times; ``--compare`` reports a field that differs where the baseline itself was
stable as a difference, and lists the models that vary on the baseline.
"""

from __future__ import annotations

import ast
import collections
import hashlib
import json
import sys


class _Stop(Exception):
    pass


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record(names) -> None:
    import pmfast
    import pmfast.linker
    import pmfast.vmath
    import pmfast.vmath._cache
    import pmfast.vmath.elemwise
    import pmfast.vmath.ops
    from pmfast import models
    from pmfast.compiler import entry, entry_spec, linalg, parallel

    import pmfast.compiler.salt

    pmfast.linker.compile_salt = lambda: "SALT"
    pmfast.compiler.salt.compile_salt = lambda: "SALT"  # scan's and ops' keys import it from there
    for mod in (pmfast.vmath, pmfast.vmath._cache, pmfast.vmath.elemwise, pmfast.vmath.ops):
        mod.VERSION = "VMATH"
    linalg._SOURCE = "SOURCE"  # read by its keys when they are made
    sizes = {"wide_additive": {"n": 12}, "hier_var": {"n_groups": 2}}  # as tests/test_zoo_nodes.py

    got: dict = {}
    prepare = entry.prepare_entry

    def prepare_entry(spec, fn, inline=True):
        prepared = prepare(spec, fn, inline)
        py = entry_spec.graph_function(fn.vm.jit_fn)
        got[spec.kind] = {
            "nodes": len(fn.maker.fgraph.apply_nodes),
            "graph_src": _digest(ast.unparse(ast.parse(py.__source__))),
            "entry_src": _digest(prepared.source),
            "entry_key": _digest(prepared.key or "none"),
            "inlined": len(prepared.inlined),
        }
        return prepared

    def stop(self):
        raise _Stop

    entry.prepare_entry = prepare_entry
    entry.PreparedEntry.compile = stop
    parallel.fork = lambda work: None
    for name in names or list(models.ZOO):
        got.clear()
        try:
            if ":" in name or "/" in name:  # a size spec or a model file (e.g. a catalogue model)
                from pmfast.loading import load_model

                pmfast.compile(load_model(name)[0])
            else:
                pmfast.compile(models.load(name)(**sizes.get(name, {})))
        except _Stop:
            pass
        print(name, json.dumps(got), flush=True)


def compare(before_files, after_files) -> int:
    def load(files):
        seen = collections.defaultdict(set)
        for path in files:
            for line in open(path):
                name, data = line.split(" ", 1)
                for kind, fields in json.loads(data).items():
                    for field, value in fields.items():
                        seen[(name, kind, field)].add(value)
        return seen

    before, after = load(before_files), load(after_files)
    varying = sorted({key[0] for key, values in before.items() if len(values) > 1})
    differences = 0
    for key in sorted(set(before) | set(after)):
        if after[key] <= before[key]:
            continue
        if len(before[key]) == 1 and len(after[key]) == 1:
            differences += 1
            print("differs:", key, sorted(before[key]), sorted(after[key]))
        else:
            print("differs (varies between runs):", key, sorted(before[key]), sorted(after[key]))
    print("varies between runs on the baseline:", ", ".join(varying) or "none")
    print("differences where the baseline is stable:", differences)
    return 1 if differences else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--compare"]:
        cut = argv.index("--")
        sys.exit(compare(argv[1:cut], argv[cut + 1 :]))
    record(argv)


if __name__ == "__main__":
    main()
