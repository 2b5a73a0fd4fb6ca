"""Where a decode's CPU time goes, by compiled function and by instruction (perf + numba).

    perf record -e cpu-clock -F 2000 -o out/prof/perf.data -- \
        .venv/bin/python scripts/profile_search.py transcribe data/real/dev/manifest.jsonl \
        --config configs/sphinx-en-us-exact.yaml decoder.threads=1 --out /tmp/prof-dev --overwrite
    .venv/bin/python scripts/profile_search.py report out/prof/perf.data --annotate compiled.search_advance

The first form runs an `asrdecode` command in this process and, when it ends, writes perf's map
of the JIT code (``/tmp/perf-<pid>.map``: every function of every compiled library, the copies
numba links into their callers included) and a dump of that code beside it
(``/tmp/perf-<pid>.code``, for the instruction view). The second prints the samples by symbol
and, with ``--annotate``, the hottest instructions of the named function(s) with their share and
the two instructions before each (a sample lands on the instruction after a stalled load as often
as on the load). Functions LLVM inlined (``_emit``, the memo and map probes) count as their caller.

Nothing here is a timing claim: perf's sampling slows the run, and the shares are what it shows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path


def jit_functions() -> list[tuple[int, int, str]]:
    """(address, size, name) of every function in the loaded asrdecode numba libraries: sizes run
    to the next known start (capped at 256 KiB); names shortened to the Python qualname."""
    import numba.core.registry

    starts: dict[int, str] = {}
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("asrdecode") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if not isinstance(obj, numba.core.registry.CPUDispatcher):
                continue
            for cres in obj.overloads.values():
                lib = cres.library
                # a library loaded from numba's disk cache keeps its functions in _shared_module
                module = lib._shared_module or lib._final_module
                for fn in module.functions:
                    if fn.is_declaration:
                        continue
                    try:
                        addr = lib.get_pointer_to_function(fn.name)
                    except Exception:  # noqa: BLE001 - a symbol the engine did not keep
                        continue
                    if addr:
                        starts[addr] = short_name(fn.name)
    ordered = sorted(starts)
    out = []
    for i, addr in enumerate(ordered):
        end = ordered[i + 1] if i + 1 < len(ordered) else addr + 65536
        out.append((addr, min(end - addr, 262144), starts[addr]))
    return out


def short_name(mangled: str) -> str:
    """numba's mangled ``_ZN<len><name>...`` name as ``module.function`` (its last two parts);
    ``cpython.`` / ``cfunc.`` wrappers keep that prefix."""
    prefix = ""
    for wrapper in ("cfunc.", "_ZN7cpython"):
        if mangled.startswith(wrapper):
            prefix = wrapper.strip("_ZN7.") + "."
            mangled = "_ZN" + mangled[len(wrapper) :].removeprefix("_ZN")
    if not mangled.startswith("_ZN"):
        return prefix + mangled
    names, i = [], 3
    while i < len(mangled) and mangled[i].isdigit():
        j = i
        while mangled[j].isdigit():
            j += 1
        n = int(mangled[i:j])
        names.append(mangled[j : j + n])
        i = j + n
    return prefix + ".".join(names[-2:])


def write_maps(pid: int) -> None:
    functions = jit_functions()
    with open(f"/tmp/perf-{pid}.map", "w") as f:
        for addr, size, name in functions:
            f.write(f"{addr:x} {size:x} {name}\n")
    code = {}
    fd = os.open("/proc/self/mem", os.O_RDONLY)  # an unmapped page is an error here, not a crash
    try:
        for addr, size, _ in functions:
            try:
                code[f"{addr:x}"] = os.pread(fd, size, addr).hex()
            except OSError:
                continue
    finally:
        os.close(fd)
    Path(f"/tmp/perf-{pid}.code").write_text(json.dumps(code))
    print(f"perf map: /tmp/perf-{pid}.map ({len(functions)} functions)", file=sys.stderr)


def run(argv: list[str]) -> int:
    from asrdecode.cli import main

    try:
        main.main(args=argv, standalone_mode=False)
    finally:
        write_maps(os.getpid())
    return 0


def report(data: Path, annotate: list[str], top: int) -> None:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--sort", "sym", "--percent-limit", "0.5"],
        capture_output=True,
        text=True,
    ).stdout
    print("\n".join(line for line in out.splitlines() if line and not line.startswith("#")))
    if not annotate:
        return
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "pid,ip"], capture_output=True, text=True
    ).stdout
    ips = Counter()
    pids = Counter()
    for line in script.splitlines():
        fields = line.split()
        if len(fields) == 2:
            pids[fields[0]] += 1
            ips[int(fields[1], 16)] += 1
    total = sum(ips.values())
    # the process this script ran in wrote the map (a graph build's child process did not)
    pid = next((p for p, _ in pids.most_common() if Path(f"/tmp/perf-{p}.map").is_file()), None)
    if pid is None:
        sys.exit(f"{data}: no /tmp/perf-<pid>.map of its processes (record it with this script)")
    functions = [line.split() for line in Path(f"/tmp/perf-{pid}.map").read_text().splitlines()]
    code = json.loads(Path(f"/tmp/perf-{pid}.code").read_text())
    for start_hex, size_hex, name in functions:
        if not any(name.endswith(a) for a in annotate):
            continue
        start, size = int(start_hex, 16), int(size_hex, 16)
        hits = {ip - start: n for ip, n in ips.items() if start <= ip < start + size}
        own = sum(hits.values())
        if not own:
            continue
        print(f"\n{name} @ {start_hex}: {own} samples, {100 * own / total:.1f}% of all")
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            f.write(bytes.fromhex(code[start_hex]))
            f.flush()
            asm = subprocess.run(
                ["objdump", "-D", "-b", "binary", "-mi386:x86-64", f.name], capture_output=True, text=True
            ).stdout
        lines = {}
        for line in asm.splitlines():
            m = re.match(r"\s+([0-9a-f]+):\s+(?:[0-9a-f]{2} )+\s*(.*)", line)
            if m:
                lines[int(m.group(1), 16)] = m.group(2)
        offsets = sorted(lines)
        for off, n in sorted(hits.items(), key=lambda kv: -kv[1])[:top]:
            i = offsets.index(off) if off in lines else -1
            before = " | ".join(lines[o] for o in offsets[max(i - 2, 0) : i]) if i > 0 else ""
            print(f"  {100 * n / own:5.1f}%  +{off:5x}  {lines.get(off, '?'):40s}  [{before}]")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "report":
        p = argparse.ArgumentParser(description="print a profile written by this script under perf")
        p.add_argument("data", type=Path)
        p.add_argument("--annotate", nargs="*", default=[], help="function name suffixes")
        p.add_argument("--top", type=int, default=25)
        a = p.parse_args(sys.argv[2:])
        report(a.data, a.annotate, a.top)
        return
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
