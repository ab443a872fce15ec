"""PTX analysis for the static GPU model: instruction classes, loop trip counts, dynamic counts per thread.

Loop trip counts follow Tuna's Algorithm 3: loops are back edges in the PTX, and the iteration count is
recovered from the registers of the exit test (initial value, per-iteration update, compared bound).
The load-to-first-use distance in cycles is XFEATUR's "cycles between data-dependent instructions".
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
from dataclasses import dataclass, field

from .operands import split_operands

log = logging.getLogger(__name__)

_TABLE_PATH = os.path.join(os.path.dirname(__file__), "tables", "nvidia.json")


class PtxParseError(ValueError):
    """The text is not PTX that this parser understands (no function bodies found)."""


# ---------------------------------------------------------------------------------------------------
# Latency / throughput table


@dataclass(frozen=True)
class LatencyTable:
    """Per-class latencies (cycles) and throughputs (results per clock per SM) of one architecture."""

    arch: str
    latency: dict[str, float]
    throughput: dict[str, float]
    memory_latency: dict[str, float]
    subpartitions: int = 4
    reg_alloc_unit: int = 256
    smem_alloc_unit: int = 128
    smem_reserved_per_block: int = 0

    def latency_of(self, cls: str) -> float:
        return self.latency.get(cls, self.latency["other"])

    def issue_cycles(self, cls: str, warp_size: int = 32) -> float:
        """Cycles one warp instruction of `cls` occupies its SM sub-partition's pipe."""
        per_sub = self.throughput.get(cls, self.throughput["other"]) / self.subpartitions
        return max(1.0, warp_size / per_sub)


@functools.lru_cache(maxsize=8)
def load_latency_table(sm_version: int, path: str = _TABLE_PATH) -> LatencyTable:
    """The table entry for `sm_version` (e.g. 90), or the newest older one in the file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    versions = sorted(int(k[3:]) for k in data if k.startswith("sm_"))
    usable = [v for v in versions if v <= sm_version] or versions[:1]
    chosen = usable[-1]
    if chosen != sm_version:
        log.info("no latency table for sm_%d; using sm_%d", sm_version, chosen)
    entry = data[f"sm_{chosen}"]
    return LatencyTable(
        arch=f"sm_{chosen}",
        latency={k: float(v) for k, v in entry["latency"].items()},
        throughput={k: float(v) for k, v in entry["throughput"].items()},
        memory_latency={k: float(v) for k, v in entry["memory_latency"].items()},
        subpartitions=int(entry["subpartitions"]),
        reg_alloc_unit=int(entry["reg_alloc_unit"]),
        smem_alloc_unit=int(entry["smem_alloc_unit"]),
        smem_reserved_per_block=int(entry["smem_reserved_per_block"]),
    )


# ---------------------------------------------------------------------------------------------------
# Instructions and their classes

_TYPES = {
    "f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "tf32", "e4m3", "e5m2", "e4m3x2", "e5m2x2",
    "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "b8", "b16", "b32", "b64", "b128", "pred",
}
_TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16, "16x2": 4}
_SPACES = ("global", "shared", "local", "param", "const")
_NO_DEST = {"st", "stmatrix", "red", "bar", "barrier", "bra", "brx", "ret", "exit", "membar", "fence", "cp",
            "call", "prefetch", "prefetchu", "trap", "pmevent", "discard", "griddepcontrol"}
_INT_ADD = {"add", "sub", "min", "max", "abs", "neg", "addc", "subc", "cvta"}
_INT_LOGIC = {"and", "or", "xor", "not", "cnot", "shl", "shr", "shf", "bfe", "bfi", "prmt", "popc", "clz",
              "brev", "lop3", "bmsk", "szext", "fns", "dp4a", "dp2a"}
_SFU = {"rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh"}
_SPECIAL = re.compile(r"^%(tid|ntid|ctaid|nctaid|laneid|warpid|nwarpid|smid|nsmid|gridid|clock|clock64|"
                      r"lanemask_\w+|globaltimer\w*|cluster\w*|dynamic_smem_size)(\.[xyz])?$")
_REG = re.compile(r"%[A-Za-z_][\w]*")


def _types_of(mods: tuple[str, ...]) -> list[str]:
    return [m for m in mods if m in _TYPES]


def _precision(types: list[str]) -> str | None:
    """'fp32', 'fp64' or 'fp16' for floating-point ops, None for integer/bit ops."""
    if "f64" in types:
        return "fp64"
    if any(t.startswith(("f16", "bf16", "e4m3", "e5m2")) for t in types):
        return "fp16"
    if any(t in ("f32", "tf32") for t in types):
        return "fp32"
    return None


def classify(opcode: str, operands: tuple[str, ...] = ()) -> str:
    """Instruction class of a PTX opcode, e.g. 'fp32.fma', 'ld.shared', 'int.mul', 'bar'."""
    parts = opcode.split(".")
    base, mods = parts[0], tuple(p.split("::")[0] for p in parts[1:])
    types = _types_of(mods)
    prec = _precision(types)
    if base in ("ld", "ldu", "tex", "suld", "ld.global"):
        space = next((s for s in _SPACES if s in mods), "global")
        return f"ld.{space}"
    if base == "ldmatrix":
        return "ld.shared"
    if base in ("st", "sust"):
        return f"st.{next((s for s in _SPACES if s in mods), 'global')}"
    if base == "stmatrix":
        return "st.shared"
    if base == "cp":
        return "cp.async" if ("async" in mods and ("shared" in mods or "bulk" in mods)
                              and not any(m.startswith(("commit", "wait")) for m in mods)) else "sync"
    if base in ("atom", "red"):
        return "atom.shared" if "shared" in mods else "atom.global"
    if base in ("bar", "barrier"):
        return "bar"
    if base in ("membar", "fence", "mbarrier", "griddepcontrol"):
        return "sync"
    if base in ("bra", "brx"):
        return "branch"
    if base == "call":
        return "call"
    if base in ("ret", "exit", "trap"):
        return "ret"
    if base in ("shfl", "vote", "match", "redux", "activemask"):
        return "shfl"
    if base == "wmma" and mods and mods[0] in ("load", "store"):
        space = next((s for s in _SPACES if s in mods), "global")
        return f"{'ld' if mods[0] == 'load' else 'st'}.{space}"
    if base in ("mma", "wmma", "wgmma"):
        return "mma"
    if base in ("setp", "set"):
        return "setp"
    if base in ("selp", "slct"):
        return "selp"
    if base == "mov":
        return "special" if operands[1:] and _SPECIAL.match(operands[1].strip()) else "mov"
    if base == "cvt":
        return "cvt" if prec else "mov"
    if base in _SFU:
        return "sfu"
    if base == "div":
        if prec is None:
            return "int.div"
        return "sfu" if ("approx" in mods or "full" in mods) else f"{prec}.div"
    if base == "rem":
        return "int.div"
    if base in ("fma", "mad", "mul", "add", "sub", "min", "max", "abs", "neg", "copysign", "testp"):
        if prec is None:
            if base in ("mad", "mul", "mul24", "mad24"):
                return "int.mul"
            return "int.add"
        if base in ("fma", "mad"):
            return f"{prec}.fma"
        return f"{prec}.mul" if base == "mul" else f"{prec}.add"
    if base in ("mul24", "mad24", "sad", "mul.wide"):
        return "int.mul"
    if base in _INT_ADD:
        return "int.add"
    if base in _INT_LOGIC:
        return "int.logic"
    return "other"


def _mma_shape(mods: tuple[str, ...]) -> tuple[int, int, int] | None:
    for m in mods:
        hit = re.fullmatch(r"m(\d+)n(\d+)k(\d+)", m)
        if hit:
            return int(hit.group(1)), int(hit.group(2)), int(hit.group(3))
    return None


def mma_fma_per_thread(opcode: str) -> float:
    """Multiply-adds one thread's share of a tensor-core instruction performs (0 if not an mma)."""
    parts = opcode.split(".")
    shape = _mma_shape(tuple(parts[1:]))
    if classify(opcode) != "mma" or shape is None:
        return 0.0
    threads = 128 if parts[0] == "wgmma" else 32  # wgmma is issued by a warpgroup of four warps
    return shape[0] * shape[1] * shape[2] / threads


def _width_bytes(base: str, mods: tuple[str, ...], operands: tuple[str, ...], cls: str) -> int:
    """Bytes one thread moves with a memory instruction (0 for other instructions)."""
    if cls == "cp.async":
        try:
            return int(operands[2], 0)
        except (IndexError, ValueError):
            return 16
    if not cls.startswith(("ld.", "st.", "atom.")):
        return 0
    if base in ("ldmatrix", "stmatrix"):
        n = next((int(m[1:]) for m in mods if m in ("x1", "x2", "x4")), 1)
        return 4 * n
    if base == "wmma":
        shape = _mma_shape(mods)
        if shape is None or len(mods) < 2:
            return 0
        m, n, k = shape
        elems = {"a": m * k, "b": k * n}.get(mods[1], m * n)
        size = next((_TYPE_BYTES[re.sub(r"^[a-z]+", "", t)] for t in reversed(_types_of(mods))
                     if re.sub(r"^[a-z]+", "", t) in _TYPE_BYTES), 2)
        return elems * size // 32
    vec = next((int(m[1:]) for m in mods if m in ("v2", "v4", "v8")), 1)
    size = 4
    for t in _types_of(mods):
        digits = re.sub(r"^[a-z]+", "", t)
        if digits in _TYPE_BYTES:
            size = _TYPE_BYTES[digits]
    return vec * size


@dataclass(frozen=True)
class Instruction:
    """One PTX instruction: opcode with modifiers, operands, guard predicate and derived facts."""

    index: int
    line: int
    opcode: str
    operands: tuple[str, ...]
    guard: str | None
    guard_negated: bool
    cls: str
    dests: tuple[str, ...]
    reads: frozenset[str]
    width_bytes: int

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def mods(self) -> tuple[str, ...]:
        return tuple(p.split("::")[0] for p in self.opcode.split(".")[1:])




def _make_instruction(index: int, line: int, text: str) -> Instruction | None:
    m = re.match(r"^(@(!?)(%?[\w]+)\s+)?([A-Za-z][\w.:]*)\s*(.*)$", text)
    if not m:
        return None
    guard = m.group(3)
    opcode = m.group(4)
    operands = split_operands(m.group(5))
    base = opcode.split(".")[0]
    mods = tuple(p.split("::")[0] for p in opcode.split(".")[1:])
    cls = classify(opcode, operands)
    has_dest = (base not in _NO_DEST and cls not in ("bar", "sync", "cp.async") and not cls.startswith("st.")
                and bool(operands))
    dests: tuple[str, ...] = ()
    if has_dest:
        dests = tuple(_REG.findall(operands[0].split("|")[0])) + tuple(
            _REG.findall(operands[0].split("|")[1]) if "|" in operands[0] else ())
    read_ops = operands[1:] if has_dest else operands
    reads = frozenset(r for op in read_ops for r in _REG.findall(op) if not _SPECIAL.match(r))
    if guard:
        reads = reads | {guard}
    return Instruction(index=index, line=line, opcode=opcode, operands=operands, guard=guard,
                       guard_negated=m.group(2) == "!", cls=cls, dests=dests, reads=reads,
                       width_bytes=_width_bytes(base, mods, operands, cls))


@dataclass
class PtxFunction:
    """A kernel (`.entry`) or device function (`.func`) with its instructions and labels."""

    name: str
    is_kernel: bool
    instructions: list[Instruction]
    labels: dict[str, int]  # label -> index of the first instruction after it
    shared_bytes: int = 0  # statically declared .shared arrays


@dataclass
class PtxModule:
    target: str
    functions: dict[str, PtxFunction]

    @property
    def kernels(self) -> dict[str, PtxFunction]:
        return {k: f for k, f in self.functions.items() if f.is_kernel}


_RE_HEADER = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern)\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)",
                        re.MULTILINE)
_RE_SHARED = re.compile(r"\.shared\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+[\w$]+\s*\[(\d+)\]")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def _body_span(text: str, start: int) -> tuple[int, int] | None:
    """Span of the `{...}` body after a header at `start`, or None for a prototype."""
    depth_paren = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth_paren += 1
        elif ch == ")":
            depth_paren -= 1
        elif ch == ";" and depth_paren == 0:
            return None
        elif ch == "{" and depth_paren == 0:
            break
        i += 1
    else:
        return None
    depth, j = 0, i
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return i + 1, j
        j += 1
    return None


def _parse_body(name: str, is_kernel: bool, body: str, first_line: int) -> PtxFunction:
    instructions: list[Instruction] = []
    labels: dict[str, int] = {}
    shared = 0
    for offset, raw in enumerate(body.split("\n")):
        line_no = first_line + offset
        for stmt in raw.split(";"):
            stmt = stmt.strip().strip("{}").strip()
            while True:
                lm = re.match(r"^([\w$.]+):(?!:)\s*(.*)$", stmt)
                if not lm:
                    break
                labels[lm.group(1)] = len(instructions)
                stmt = lm.group(2).strip()
            if not stmt:
                continue
            if stmt.startswith("."):
                sm = _RE_SHARED.search(stmt)
                if sm:
                    digits = re.sub(r"^[a-z]+", "", sm.group(1))
                    shared += int(sm.group(2)) * _TYPE_BYTES.get(digits, 1)
                continue
            ins = _make_instruction(len(instructions), line_no, stmt)
            if ins is not None:
                instructions.append(ins)
    return PtxFunction(name, is_kernel, instructions, labels, shared)


def parse_ptx(text: str) -> PtxModule:
    """Parse PTX text into functions; raises `PtxParseError` if it holds no function body."""
    clean = _strip_comments(text)
    tm = re.search(r"^\s*\.target\s+([\w,\s]+?)\s*$", clean, re.MULTILINE)
    functions: dict[str, PtxFunction] = {}
    for hm in _RE_HEADER.finditer(clean):
        span = _body_span(clean, hm.end())
        if span is None:
            continue
        first_line = clean.count("\n", 0, span[0]) + 1
        functions[hm.group(2)] = _parse_body(hm.group(2), hm.group(1) == "entry",
                                             clean[span[0]:span[1]], first_line)
    if not functions:
        raise PtxParseError("no .entry or .func body found in the PTX text")
    return PtxModule(target=tm.group(1).split(",")[0].strip() if tm else "", functions=functions)


# ---------------------------------------------------------------------------------------------------
# Loops and trip counts (Tuna Algorithm 3)


@dataclass
class Loop:
    """A PTX loop: instructions [start, end], `end` being its last back-edge branch."""

    id: int
    header: str
    start: int
    end: int
    parent: int | None = None
    depth: int = 0
    trip_count: int | None = None
    induction: str | None = None  # register stepped by the loop and compared in the exit test
    init: int | None = None  # its initial value, where that is a constant
    step: int | None = None
    bound: int | None = None  # the value it is compared with, where that is a constant
    reason: str = ""  # why the trip count is unknown

    def contains(self, index: int) -> bool:
        return self.start <= index <= self.end


class _Lin:
    """Integer affine expression over symbols: sum(coef * symbol) + const."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict[str, int] | None = None, const: int = 0):
        self.terms = {k: v for k, v in (terms or {}).items() if v != 0}
        self.const = const

    @staticmethod
    def sym(name: str) -> _Lin:
        return _Lin({name: 1})

    def __add__(self, other: _Lin) -> _Lin:
        terms = dict(self.terms)
        for k, v in other.terms.items():
            terms[k] = terms.get(k, 0) + v
        return _Lin(terms, self.const + other.const)

    def __sub__(self, other: _Lin) -> _Lin:
        return self + other.scale(-1)

    def scale(self, k: int) -> _Lin:
        return _Lin({s: v * k for s, v in self.terms.items()}, self.const * k)

    @property
    def is_const(self) -> bool:
        return not self.terms


_NEGATE = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}
_UNSIGNED = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_MAX_TRIP = 1 << 31


def _first_false(cmp: str, k: int, s: int) -> int | None:
    """Smallest n >= 1 with not cmp(k + (n-1)*s, 0); None if the loop would not end."""
    if cmp == "gt":
        return _first_false("lt", -k, -s)
    if cmp == "ge":
        return _first_false("le", -k, -s)
    if cmp == "lt":
        if k >= 0:
            return 1
        return None if s <= 0 else 1 + math.ceil(-k / s)
    if cmp == "le":
        if k > 0:
            return 1
        return None if s <= 0 else 1 + math.ceil((1 - k) / s)
    if cmp == "ne":
        if k == 0:
            return 1
        if s == 0 or (-k) % s != 0 or (-k) // s < 0:
            return None
        return 1 + (-k) // s
    if cmp == "eq":
        if k != 0:
            return 1
        return 2 if s != 0 else None
    return None


def _immediate(op: str) -> int | None:
    op = op.strip()
    try:
        if re.fullmatch(r"-?0[xX][0-9a-fA-F]+U?", op):
            return int(op.rstrip("U"), 16)
        if re.fullmatch(r"-?\d+U?", op):
            return int(op.rstrip("U"))
    except ValueError:
        return None
    return None


def _find_loops(func: PtxFunction) -> list[Loop]:
    """Back edges (a branch to a label at or above it) grouped per header, with nesting."""
    spans: dict[str, list[int]] = {}
    for ins in func.instructions:
        if ins.cls == "branch" and ins.operands:
            target = ins.operands[0].strip()
            pos = func.labels.get(target)
            if pos is not None and pos <= ins.index:
                spans.setdefault(target, [pos, ins.index])[1] = ins.index
    order = sorted(spans.items(), key=lambda kv: (kv[1][0], -kv[1][1]))
    loops = [Loop(id=i, header=h, start=s, end=e) for i, (h, (s, e)) in enumerate(order)]
    stack: list[Loop] = []
    for lp in loops:
        while stack and not (stack[-1].start <= lp.start and lp.end <= stack[-1].end):
            stack.pop()
        if stack:
            lp.parent, lp.depth = stack[-1].id, stack[-1].depth + 1
        stack.append(lp)
    return loops


class _LoopSolver:
    """One linear symbolic pass over a function that recovers each loop's trip count from registers.

    At a loop header every register the loop writes becomes the symbol `reg@L<id>` (its value at the
    start of an iteration); its value at the back edge minus that symbol is its constant step; its value
    just before the header is its initial value. The exit test `setp` is then an affine function of the
    iteration number, solved in closed form.
    """

    def __init__(self, func: PtxFunction, loops: list[Loop]):
        self.func = func
        self.loops = loops
        self.by_id = {lp.id: lp for lp in loops}
        n = len(func.instructions)
        self.innermost: list[int | None] = [None] * n
        for lp in sorted(loops, key=lambda x: x.depth):
            for i in range(lp.start, min(lp.end, n - 1) + 1):
                self.innermost[i] = lp.id
        self.owner: dict[str, int | None] = {}
        self.written: dict[int, set[str]] = {
            lp.id: {d for ins in func.instructions[lp.start:lp.end + 1] for d in ins.dests} for lp in loops}

    def _fresh(self, name: str, loop_id: int | None) -> _Lin:
        self.owner[name] = loop_id
        return _Lin.sym(name)

    def _variant(self, sym: str, loop: Loop) -> bool:
        lid = self.owner.get(sym)
        while lid is not None:
            if lid == loop.id:
                return True
            lid = self.by_id[lid].parent
        return False

    def _value(self, op: str, state: dict[str, _Lin]) -> _Lin | None:
        op = op.strip()
        if op in state:
            return state[op]
        if _SPECIAL.match(op):
            return _Lin.sym(op)
        imm = _immediate(op)
        if imm is not None:
            return _Lin(None, imm)
        if op.startswith("%"):
            state[op] = self._fresh(f"{op}@entry", None)
            return state[op]
        if re.fullmatch(r"[A-Za-z_$][\w$]*", op):
            return _Lin.sym(f"&{op}")
        return None

    def _transfer(self, ins: Instruction, state: dict[str, _Lin]) -> _Lin | None:
        """Value of the single destination of an integer instruction, where it is affine."""
        base, mods, ops = ins.base, ins.mods, ins.operands
        if _precision(_types_of(mods)) is not None or "cc" in mods:
            return None

        def val(k: int) -> _Lin | None:
            return self._value(ops[k], state) if k < len(ops) else None

        def product(a: _Lin | None, b: _Lin | None) -> _Lin | None:
            if a is None or b is None:
                return None
            if a.is_const:
                return b.scale(a.const)
            return a.scale(b.const) if b.is_const else None

        if base in ("mov", "cvt", "cvta") and len(ops) == 2:
            return val(1)
        if base in ("add", "sub") and len(ops) == 3:
            a, b = val(1), val(2)
            if a is None or b is None:
                return None
            return a + b if base == "add" else a - b
        if base == "mul" and ("lo" in mods or "wide" in mods) and len(ops) == 3:
            return product(val(1), val(2))
        if base == "mad" and ("lo" in mods or "wide" in mods) and len(ops) == 4:
            p, c = product(val(1), val(2)), val(3)
            return None if p is None or c is None else p + c
        if base == "shl" and len(ops) == 3:
            a, b = val(1), val(2)
            if a is None or b is None or not b.is_const or not 0 <= b.const < 64:
                return None
            return a.scale(1 << b.const)
        if base == "neg" and len(ops) == 2:
            a = val(1)
            return None if a is None else a.scale(-1)
        return None

    def run(self) -> None:
        func, loops = self.func, self.loops
        starts: dict[int, list[Loop]] = {}
        ends: dict[int, list[Loop]] = {}
        for lp in loops:
            starts.setdefault(lp.start, []).append(lp)
            ends.setdefault(lp.end, []).append(lp)
        state: dict[str, _Lin] = {}
        entry: dict[int, dict[str, _Lin]] = {}
        setp: dict[str, tuple[str, _Lin, _Lin] | None] = {}
        exits: dict[int, tuple[Instruction, tuple[str, _Lin, _Lin] | None]] = {}
        for ins in func.instructions:
            i = ins.index
            for lp in sorted(starts.get(i, []), key=lambda x: x.depth):
                entry[lp.id] = dict(state)
                for reg in self.written[lp.id]:
                    state[reg] = self._fresh(f"{reg}@L{lp.id}", lp.id)
            self._execute(ins, state, setp)
            inner = self.innermost[i]
            if ins.cls == "branch" and ins.guard and inner is not None:
                target = func.labels.get(ins.operands[0].strip()) if ins.operands else None
                lp = self.by_id[inner]
                if target is not None and not lp.start <= target <= lp.end and lp.id not in exits:
                    exits[lp.id] = (ins, setp.get(ins.guard))
            for lp in sorted(ends.get(i, []), key=lambda x: -x.depth):
                self._solve(lp, ins, state, entry[lp.id], setp, exits.get(lp.id))
                self._leave(lp, state, entry[lp.id])

    def _execute(self, ins: Instruction, state: dict[str, _Lin], setp: dict) -> None:
        if ins.base == "setp" and ins.dests:
            setp[ins.dests[0]] = None
            if len(ins.dests) > 1:
                setp[ins.dests[1]] = None
            mods = ins.mods
            cmp = _UNSIGNED.get(mods[0], mods[0]) if mods else ""
            combined = any(m in ("and", "or", "xor") for m in mods[1:])
            if (ins.guard is None and not combined and cmp in _NEGATE
                    and _precision(_types_of(mods)) is None and len(ins.operands) >= 3):
                a, b = self._value(ins.operands[1], state), self._value(ins.operands[2], state)
                if a is not None and b is not None:
                    setp[ins.dests[0]] = (cmp, a, b)
                    if len(ins.dests) > 1:
                        setp[ins.dests[1]] = (_NEGATE[cmp], a, b)
            return
        if ins.base == "not" and "pred" in ins.mods and len(ins.dests) == 1 and len(ins.operands) == 2:
            src = setp.get(ins.operands[1].strip())
            setp[ins.dests[0]] = None if src is None else (_NEGATE[src[0]], src[1], src[2])
            return
        if not ins.dests:
            return
        value = self._transfer(ins, state) if ins.guard is None and len(ins.dests) == 1 else None
        for d in ins.dests:
            if d.startswith("%p"):
                setp[d] = None
            state[d] = value if value is not None else self._fresh(f"v{ins.index}:{d}", self.innermost[ins.index])

    def _iteration_form(self, expr: _Lin, lp: Loop, steps: dict[str, int], init: dict[str, _Lin],
                        settled: dict[str, _Lin] | None = None, late: bool = False) -> tuple[_Lin, int] | None:
        """Write `expr` (taken during iteration n) as A + (n-1)*S with A free of loop-variant symbols.

        A register in `settled` is reset to the same loop-invariant value at every back edge: it holds its
        initial value in iteration 1 and the settled one from iteration 2 on; the form uses the settled
        value if `late` (valid for n >= 2), else the initial one (valid for n = 1)."""
        a, s = _Lin(None, expr.const), 0
        for sym, coef in expr.terms.items():
            reg, _, tag = sym.rpartition("@L")
            if tag == str(lp.id) and reg:
                if settled is not None and reg in settled:
                    value = settled[reg] if late else init.get(reg)
                    if value is None:
                        return None
                    a = a + value.scale(coef)
                    continue
                if reg not in steps:
                    return None
                start = init.get(reg)
                if start is None:
                    return None
                a, s = a + start.scale(coef), s + coef * steps[reg]
            elif self._variant(sym, lp):
                return None
            else:
                a = a + _Lin({sym: coef})
        return a, s

    def _solve(self, lp: Loop, branch: Instruction, state: dict[str, _Lin], init: dict[str, _Lin],
               setp: dict, exit_info) -> None:
        steps: dict[str, int] = {}
        settled: dict[str, _Lin] = {}  # e.g. LLVM's two-trip loops: `add r1, i, 1; mov i, 1; setp.lt r1, 2`
        for reg in self.written[lp.id]:
            diff = state[reg] - _Lin.sym(f"{reg}@L{lp.id}")
            if diff.is_const:
                steps[reg] = diff.const
            elif not any(self._variant(sym, lp) for sym in state[reg].terms):
                settled[reg] = state[reg]
        if branch.guard is not None:
            test, negated, body_offset = setp.get(branch.guard), branch.guard_negated, 0
        elif exit_info is not None:
            # top-tested loop: unconditional back edge, the exit branch leaves when its test holds
            test, negated, body_offset = exit_info[1], not exit_info[0].guard_negated, 1
        else:
            lp.reason = "no exit test"
            return
        if test is None:
            lp.reason = "exit test is not an integer compare of affine registers"
            return
        cmp, a, b = test
        if negated:
            cmp = _NEGATE[cmp]
        n = self._exit_iteration(cmp, a, b, lp, steps, init, settled)
        if isinstance(n, str):
            lp.reason = n
            return
        if n is None or n - body_offset > _MAX_TRIP:
            lp.reason = "exit test never fails"
            return
        lp.trip_count = max(0, n - body_offset)
        for expr, other in ((a, b), (b, a)):
            regs = [s.rpartition("@L")[0] for s in expr.terms if s.endswith(f"@L{lp.id}")]
            if len(regs) == 1 and regs[0] in steps:
                lp.induction, lp.step = regs[0], steps[regs[0]]
                start = init.get(regs[0])
                lp.init = start.const if start is not None and start.is_const else None
                lp.bound = other.const if other.is_const else None
                break

    def _exit_iteration(self, cmp: str, a: _Lin, b: _Lin, lp: Loop, steps: dict[str, int],
                        init: dict[str, _Lin], settled: dict[str, _Lin]) -> int | None | str:
        """First iteration n >= 1 in which `cmp(a - b, 0)` fails (None: never); a string says why it is unknown."""
        forms = []
        for late in ((False, True) if settled else (False,)):
            fa = self._iteration_form(a, lp, steps, init, settled, late)
            fb = self._iteration_form(b, lp, steps, init, settled, late)
            if fa is None or fb is None:
                return "compared values are not affine in the iteration number"
            diff, slope = fa[0] - fb[0], fa[1] - fb[1]
            if not diff.is_const:
                return "bound depends on runtime values: " + ", ".join(sorted(diff.terms))
            forms.append((diff.const, slope))
        if not settled:
            return _first_false(cmp, *forms[0])
        if _first_false(cmp, forms[0][0], 0) == 1:  # the test fails in iteration 1, before anything settles
            return 1
        k, slope = forms[1]
        later = _first_false(cmp, k + slope, slope)  # iterations 2, 3, ... counted from 1
        return None if later is None else later + 1

    def _leave(self, lp: Loop, state: dict[str, _Lin], init: dict[str, _Lin]) -> None:
        """Register values after the loop exits, in terms of symbols that are still meaningful."""
        for reg in self.written[lp.id]:
            val = state[reg]
            diff = val - _Lin.sym(f"{reg}@L{lp.id}")
            if lp.trip_count is not None and diff.is_const and reg in init:
                state[reg] = init[reg] + _Lin(None, diff.const * lp.trip_count)
            elif any(self._variant(s, lp) for s in val.terms):
                state[reg] = self._fresh(f"exit{lp.id}:{reg}", lp.parent)


def find_loops(func: PtxFunction) -> list[Loop]:
    """Loops of `func` with their trip counts recovered from registers (None where unknown)."""
    loops = _find_loops(func)
    if loops:
        _LoopSolver(func, loops).run()
    for lp in loops:
        if lp.trip_count is None:
            log.debug("%s: loop %s trip count unknown (%s)", func.name, lp.header, lp.reason)
    return loops


# ---------------------------------------------------------------------------------------------------
# Dynamic counts per thread


@dataclass
class DynamicProfile:
    """Instructions one thread executes, per class, from static counts times enclosing trip counts."""

    function: str
    loops: list[Loop]
    multipliers: list[float]  # executions of each instruction per thread
    counts: dict[str, float]  # class -> dynamic instructions per thread
    bytes: dict[str, float]  # memory class -> bytes per thread
    static_counts: dict[str, int]
    unknown_loops: int = 0  # loops whose trip count fell back to 1
    unresolved_calls: int = 0
    mma_fma: float = 0.0  # multiply-adds per thread done by tensor-core instructions

    @property
    def total(self) -> float:
        return float(sum(self.counts.values()))

    def count(self, *classes: str) -> float:
        return float(sum(self.counts.get(c, 0.0) for c in classes))


def dynamic_profile(func: PtxFunction, module: PtxModule | None = None,
                    _stack: tuple[str, ...] = ()) -> DynamicProfile:
    """Dynamic instruction counts of one thread; calls to `.func`s of `module` add the callee's counts."""
    loops = find_loops(func)
    mult = [1.0] * len(func.instructions)
    for lp in loops:
        factor = float(lp.trip_count) if lp.trip_count is not None else 1.0
        for i in range(lp.start, min(lp.end + 1, len(mult))):
            mult[i] *= factor
    counts: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    static: dict[str, int] = {}
    unknown = sum(1 for lp in loops if lp.trip_count is None)
    unresolved = 0
    mma_fma = 0.0
    for ins in func.instructions:
        m = mult[ins.index]
        counts[ins.cls] = counts.get(ins.cls, 0.0) + m
        if ins.cls == "mma":
            mma_fma += m * mma_fma_per_thread(ins.opcode)
        static[ins.cls] = static.get(ins.cls, 0) + 1
        if ins.width_bytes:
            nbytes[ins.cls] = nbytes.get(ins.cls, 0.0) + m * ins.width_bytes
        if ins.cls == "call":
            callee = next((op.strip() for op in ins.operands if re.fullmatch(r"[A-Za-z_$][\w$]*", op.strip())),
                          None)
            if module is None or callee not in module.functions or callee in _stack:
                unresolved += 1
                continue
            sub = dynamic_profile(module.functions[callee], module, (*_stack, func.name))
            for k, v in sub.counts.items():
                counts[k] = counts.get(k, 0.0) + m * v
            for k, v in sub.bytes.items():
                nbytes[k] = nbytes.get(k, 0.0) + m * v
            unknown += sub.unknown_loops
            unresolved += sub.unresolved_calls
            mma_fma += m * sub.mma_fma
    if unknown:
        log.info("%s: %d loop(s) with unknown trip count counted once", func.name, unknown)
    return DynamicProfile(func.name, loops, mult, counts, nbytes, static, unknown, unresolved, mma_fma)


def work_cycles(profile: DynamicProfile, table: LatencyTable) -> float:
    """Tuna's workload per thread: sum over classes of dynamic count x latency (cycles)."""
    return float(sum(n * table.latency_of(c) for c, n in profile.counts.items()))


def issue_cycles(profile: DynamicProfile, table: LatencyTable, warp_size: int = 32) -> float:
    """Cycles a warp occupies its issue slot / pipes for the thread's dynamic instructions."""
    return float(sum(n * table.issue_cycles(c, warp_size) for c, n in profile.counts.items()))


# ---------------------------------------------------------------------------------------------------
# Load-to-use distance (XFEATUR)

LOAD_CLASSES = ("ld.global", "ld.shared", "ld.local")


@dataclass(frozen=True)
class LoadUse:
    """A load, the issue cycles of independent work before its first consumer, and what stays exposed."""

    index: int
    cls: str
    gap_cycles: float
    consumer: int | None  # index of the first reader in the same basic block, None if there is none
    latency: float
    multiplier: float

    @property
    def exposed_cycles(self) -> float:
        return max(0.0, self.latency - self.gap_cycles)


def _block_ends(func: PtxFunction) -> list[int]:
    """For each instruction, the index one past the end of its basic block."""
    n = len(func.instructions)
    leaders = set(func.labels.values())
    for ins in func.instructions:
        if ins.cls in ("branch", "ret"):
            leaders.add(ins.index + 1)
    ends = [n] * n
    nxt = n
    for i in range(n - 1, -1, -1):
        if i + 1 in leaders:
            nxt = i + 1
        ends[i] = nxt
    return ends


def _load_latency(cls: str, table: LatencyTable) -> float:
    key = {"ld.global": "dram", "ld.shared": "shared", "ld.local": "l1_hit"}[cls]
    return table.memory_latency.get(key, table.latency_of(cls))


def load_uses(func: PtxFunction, profile: DynamicProfile, table: LatencyTable,
              warp_size: int = 32) -> list[LoadUse]:
    """For each global/shared/local load: issue cycles until its first consumer in the same block."""
    ends = _block_ends(func)
    out: list[LoadUse] = []
    instrs = func.instructions
    for ins in instrs:
        if ins.cls not in LOAD_CLASSES or not ins.dests:
            continue
        dests = set(ins.dests)
        gap, consumer = 0.0, None
        for j in range(ins.index + 1, ends[ins.index]):
            if instrs[j].reads & dests:
                consumer = j
                break
            gap += table.issue_cycles(instrs[j].cls, warp_size)
        out.append(LoadUse(ins.index, ins.cls, gap, consumer, _load_latency(ins.cls, table),
                           profile.multipliers[ins.index]))
    return out


@dataclass(frozen=True)
class XFeatures:
    """XFEATUR's hardware features of one kernel (threads, blocks, dynamic counts, load-use distance)."""

    threads: int
    blocks: int
    threads_per_block: int
    dyn_instructions: float
    dyn_by_class: dict[str, float]
    global_load_gap: float  # mean issue cycles between a global load and its first use (dynamic weights)
    shared_load_gap: float
    exposed_load_cycles: float  # per thread: sum of latency not covered by independent work
    gap_histogram: dict[str, float] = field(default_factory=dict)  # bucket -> dynamic loads


GAP_BUCKETS = (0, 4, 16, 64, 256)


def _bucket(gap: float) -> str:
    prev = None
    for edge in GAP_BUCKETS:
        if gap <= edge:
            return f"<={edge}" if prev is None else f"{prev + 1}-{edge}"
        prev = edge
    return f">{GAP_BUCKETS[-1]}"


def xfeatur_features(func: PtxFunction, table: LatencyTable, grid: tuple[int, int, int],
                     block: tuple[int, int, int], module: PtxModule | None = None,
                     profile: DynamicProfile | None = None) -> XFeatures:
    """XFEATUR features of a kernel launched with `grid` x `block`."""
    profile = profile or dynamic_profile(func, module)
    uses = load_uses(func, profile, table)

    def mean_gap(cls: str) -> float:
        sel = [u for u in uses if u.cls == cls]
        weight = sum(u.multiplier for u in sel)
        return sum(u.gap_cycles * u.multiplier for u in sel) / weight if weight else 0.0

    hist: dict[str, float] = {}
    for u in uses:
        hist[_bucket(u.gap_cycles)] = hist.get(_bucket(u.gap_cycles), 0.0) + u.multiplier
    tpb = block[0] * block[1] * block[2]
    nblocks = grid[0] * grid[1] * grid[2]
    return XFeatures(
        threads=tpb * nblocks, blocks=nblocks, threads_per_block=tpb,
        dyn_instructions=profile.total, dyn_by_class=dict(profile.counts),
        global_load_gap=mean_gap("ld.global"), shared_load_gap=mean_gap("ld.shared"),
        exposed_load_cycles=sum(u.exposed_cycles * u.multiplier for u in uses),
        gap_histogram=hist,
    )
