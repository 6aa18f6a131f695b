#!/usr/bin/env python3
"""The distinct lines of code a request runs: how much of the instruction cache it needs.

From a callgrind profile taken with per-instruction costs
(`valgrind --tool=callgrind --dump-instr=yes ...`, see docs/BENCHMARKS.md, twenty-seventh
round), count the 64-byte lines of code holding an instruction run at least once every
two requests, by object and by function:

    contrib/code_lines.py callgrind.out REQUESTS [--top N]

and, with `--inlined BINARY FUNCTION` (a binary built with
`CARGO_PROFILE_RELEASE_DEBUG=line-tables-only`), which inlined calls make up the hot
lines of the functions whose name contains FUNCTION (addr2line's inline chains); with
`--cold BINARY` (the same build), the bytes of the hot lines that do not run, by function
and source line: hot code interleaved with code that does not run (error arms, rare
branches) costs cache lines too.
"""

import argparse
import collections
import re
import subprocess

LINE = 64


def parse(path):
    """Self cost (Ir) per instruction address, and each address's (object, function)."""
    names = {"fn": {}, "ob": {}}
    cost = collections.defaultdict(int)
    where = {}
    ob = fn = None
    positions = 1
    last = [0, 0]
    call_cost = False

    def name(kind, rest):
        m = re.match(r"\((\d+)\)(?: (.*))?", rest)
        if not m:
            return rest
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), m.group(1))

    def position(token, k):
        if token == "*":
            return last[k]
        if token[0] in "+-":
            return last[k] + int(token)
        return int(token, 16) if token.startswith("0x") else int(token)

    with open(path) as f:
        for line in f:
            if line.startswith("positions:"):
                positions = len(line.split()[1:])
            elif line[0].isdigit() or line[0] in "+-*":
                tokens = line.split()
                at = [position(tokens[k], k) for k in range(positions)]
                last[: len(at)] = at
                if call_cost:
                    # The inclusive cost of a call: not this instruction's own.
                    call_cost = False
                    continue
                cost[at[0]] += int(tokens[positions]) if len(tokens) > positions else 0
                where[at[0]] = (ob, fn)
            elif line.startswith("fn="):
                fn = name("fn", line[3:].strip())
            elif line.startswith("ob="):
                ob = name("ob", line[3:].strip())
            elif line.startswith("cfn="):
                name("fn", line[4:].strip())
            elif line.startswith("cob="):
                name("ob", line[4:].strip())
            elif line.startswith("calls="):
                call_cost = True
    return cost, where


def hot_lines(cost, where, requests):
    """Each line of code's runs per request (its most-run instruction's), and owner."""
    runs, owner = {}, {}
    for at, ir in cost.items():
        line, per_request = at // LINE, ir / requests
        if per_request > runs.get(line, -1.0):
            runs[line], owner[line] = per_request, where[at]
    return runs, owner


def report(cost, where, requests, top):
    runs, owner = hot_lines(cost, where, requests)
    hot = [line for line, n in runs.items() if n >= 0.5]
    print(f"lines run at least every other request: {len(hot)} ({len(hot) * LINE / 1024:.1f} KiB)")
    # How full those lines are: a line holds about 15 instructions (x86-64 averages
    # about 4 bytes each), so few hot instructions per line means hot code interleaved
    # with code that does not run (error arms, rare branches).
    hot_instructions = collections.Counter()
    for at, ir in cost.items():
        if ir / requests >= 0.5:
            hot_instructions[where[at][1]] += 1
    print(f"instructions run at least every other request: {sum(hot_instructions.values())}")
    by_object, by_function = collections.Counter(), collections.Counter()
    for line in hot:
        ob, fn = owner[line]
        by_object[(ob or "?").split("/")[-1]] += 1
        by_function[fn] += 1
    instructions = collections.Counter()
    for at, ir in cost.items():
        instructions[where[at][1]] += ir / requests
    for ob, n in by_object.most_common(6):
        print(f"{n:6d}  {ob}")
    print("lines  hot instr  instr/request  function")
    for fn, n in by_function.most_common(top):
        print(f"{n:5d}  {hot_instructions[fn]:9d}  {instructions[fn]:13.0f}  {fn[:110]}")


def load_offset(where, binary):
    """Where the profile saw the binary's functions, less their symbol-table addresses."""
    nm = {}
    listing = subprocess.run(["nm", "-C", binary], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] and parts[1] in ("t", "T"):
            nm.setdefault(parts[2], int(parts[0], 16))
    first = {}
    for at, (_, fn) in where.items():
        first[fn] = min(first.get(fn, at), at)
    return collections.Counter(first[f] - nm[f] for f in first if f in nm).most_common(1)[0][0]


def inline_chains(binary, addresses):
    """addr2line's inline chain (innermost first) of (function, file:line) per address."""
    out = subprocess.run(
        ["addr2line", "-a", "-i", "-f", "-C", "-e", binary] + [hex(a) for a in addresses],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    chains, i = [], 0
    while i < len(out):
        if out[i].startswith("0x"):
            chains.append([])
            i += 1
        else:
            chains[-1].append((out[i], out[i + 1].split("/")[-1] if i + 1 < len(out) else "?"))
            i += 2
    return chains


def inlined(cost, where, requests, binary, wanted):
    offset = load_offset(where, binary)
    lines = {}
    for at, ir in cost.items():
        if wanted in (where[at][1] or "") and ir / requests >= 0.5:
            lines[at // LINE] = min(lines.get(at // LINE, at), at)
    chains = inline_chains(binary, [at - offset for at in sorted(lines.values())])
    print(f"{len(chains)} hot lines in functions named like {wanted!r}; by the call it inlined:")
    calls = collections.Counter()
    for chain in chains:
        # Outermost last: the wanted function, then what it inlined, two deep.
        frames = chain[-2:-4:-1] if len(chain) > 1 else chain[-1:]
        calls[" > ".join(f"{f[:60]} {loc}" for f, loc in frames)] += 1
    for call, n in calls.most_common(40):
        print(f"{n:5d}  {call}")


def cold(cost, where, requests, binary, top):
    """The bytes of the binary's hot lines that do not run: how much, and whose."""
    offset = load_offset(where, binary)
    name = binary.split("/")[-1]
    hot = {
        at - offset
        for at, ir in cost.items()
        if ir / requests >= 0.5 and (where[at][0] or "").endswith(name)
    }
    lines = {at // LINE for at in hot}
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--start-address={min(lines) * LINE}",
         f"--stop-address={(max(lines) + 1) * LINE}", binary],
        capture_output=True,
        text=True,
    ).stdout
    starts = sorted(
        int(m.group(1), 16)
        for m in (re.match(r"\s*([0-9a-f]+):\s", l) for l in listing.splitlines())
        if m
    )
    hot_bytes, cold_at = 0, []
    for at, following in zip(starts, starts[1:]):
        if at // LINE in lines:
            if at in hot:
                hot_bytes += following - at
            else:
                cold_at.append((at, following - at))
    print(
        f"{len(lines)} hot lines of {name}: {hot_bytes} bytes run, "
        f"{sum(size for _, size in cold_at)} do not (padding included)"
    )
    by_function, by_place = collections.Counter(), collections.Counter()
    for (_, size), chain in zip(cold_at, inline_chains(binary, [at for at, _ in cold_at])):
        if chain:
            by_function[chain[-1][0][:100]] += size
            by_place[f"{chain[0][1]} in {chain[-1][0][:70]}"] += size
    for title, counts in (("function", by_function), ("source line", by_place)):
        print(f"bytes not run in hot lines, by {title}:")
        for key, size in counts.most_common(top):
            print(f"{size:6d}  {key}")


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("profile")
    args.add_argument("requests", type=int)
    args.add_argument("--top", type=int, default=30)
    args.add_argument("--inlined", nargs=2, metavar=("BINARY", "FUNCTION"))
    args.add_argument("--cold", metavar="BINARY")
    a = args.parse_args()
    cost, where = parse(a.profile)
    if a.inlined:
        inlined(cost, where, a.requests, *a.inlined)
    elif a.cold:
        cold(cost, where, a.requests, a.cold, a.top)
    else:
        report(cost, where, a.requests, a.top)


if __name__ == "__main__":
    main()
