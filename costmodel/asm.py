"""CPU assembly features for the static cost model (Tuna, section III-A).

Parses the assembly LLVM emits for a TVM module (x86-64 AT&T or AArch64), splits it into functions, basic
blocks and loops, maps the assembly loops to the TIR loops (Tuna's Algorithm 1, extended to copies made by
LLVM's unrolling) and counts executed instructions per class, weighted by loop trip counts.
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .operands import split_operands

log = logging.getLogger(__name__)

ARCHES = ("x86", "aarch64")

VEC_FMA = "vec_fma"
VEC_ARITH = "vec_arith"
VEC_MOVE = "vec_move"
VEC_LOAD = "vec_load"
VEC_STORE = "vec_store"
BROADCAST = "broadcast"
SHUFFLE = "shuffle"
SCALAR_LOAD = "scalar_load"
SCALAR_STORE = "scalar_store"
SCALAR_FP = "scalar_fp"
BRANCH = "branch"
OTHER = "other"
CLASSES = (
    VEC_FMA, VEC_ARITH, VEC_MOVE, VEC_LOAD, VEC_STORE, BROADCAST, SHUFFLE,
    SCALAR_LOAD, SCALAR_STORE, SCALAR_FP, BRANCH, OTHER,
)
VECTOR_CLASSES = frozenset({VEC_FMA, VEC_ARITH, VEC_MOVE, VEC_LOAD, VEC_STORE, BROADCAST, SHUFFLE})

FLAGS = "flags"  # condition flags (x86 EFLAGS, AArch64 NZCV) are tracked as one register


class AsmParseError(ValueError):
    """The text is not assembly this parser understands (wrong architecture, empty, garbage)."""


@dataclass(frozen=True, slots=True)
class Instruction:
    """One machine instruction with the facts the counters and the list scheduler need.

    `width` is the vector register width in bits for vector classes and 0 otherwise. `mem_base` names the
    base register of the memory operand (or the symbol for rip/literal addressing) for alias checks.
    """

    mnemonic: str
    operands: tuple[str, ...]
    reads: frozenset[str]
    writes: frozenset[str]
    iclass: str
    width: int
    mem_read: bool
    mem_write: bool
    mem_base: str | None
    target: str | None  # branch target label or symbol
    symbols: tuple[str, ...]  # symbols referenced by non-branch operands (lea/adrp of a function)
    text: str
    addr_reads: frozenset[str] = frozenset()  # registers read to form the memory address
    writeback: bool = False  # the address base register is updated (pre/post-index, push/pop)
    # (base, index, scale, displacement) of the memory operand when all four are known (x86), for telling apart
    # accesses of the same form that cannot overlap; None: only `mem_base` is known
    mem_addr: tuple[str, str | None, int, int] | None = None

    @property
    def is_branch(self) -> bool:
        return self.iclass == BRANCH

    @property
    def folded_load(self) -> bool:
        """A memory source folded into a non-load instruction (e.g. `vfmadd231ps (%rax){1to16}, ...`)."""
        return self.mem_read and self.iclass not in (VEC_LOAD, SCALAR_LOAD, BROADCAST)


@dataclass(frozen=True)
class BasicBlock:
    """Straight-line run of instructions `[start, end)` of a function; `label` is its first label."""

    label: str
    start: int
    end: int
    instructions: tuple[Instruction, ...]


@dataclass
class AsmLoop:
    """A natural loop: back edge(s) from the branch at `latch` to the block starting at `header`, which
    dominates them. `blocks` are the indices of the blocks of the loop body (header included).

    `trip` is the iteration count recovered from the assembly (compare/step/initial value), or None when the
    bounds are not constants (e.g. the chunk loop of a parallel lambda).
    """

    header: int  # instruction index of the header's first instruction
    latch: int  # instruction index of the (last) back-edge branch
    blocks: frozenset[int]
    latches: tuple[int, ...] = ()  # blocks ending in a back edge (LLVM may duplicate the latch)
    parent: int | None = None
    children: list[int] = field(default_factory=list)
    depth: int = 0
    trip: int | None = None
    top_tested: bool = False  # exit test in the header: the header block runs trip + 1 times
    iv: str | None = None  # induction register, its constant initial value, step and stepping instruction
    iv_init: int | None = None
    iv_step: int = 0
    iv_write: int = -1
    iv_start: tuple[object, int] | None = None  # initial value as (symbol or None, constant)


@dataclass
class AsmFunction:
    """A function of the assembly text with its instructions, labels, blocks, loops and references."""

    name: str
    arch: str
    instructions: list[Instruction]
    labels: dict[str, int]
    blocks: list[BasicBlock] = field(default_factory=list)
    loops: list[AsmLoop] = field(default_factory=list)
    calls: list[tuple[int, str]] = field(default_factory=list)  # (instruction index, function referenced)
    is_global: bool = False
    _writes: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _starts: list[int] = field(default_factory=list, repr=False)
    _block_loops: list[frozenset[int]] = field(default_factory=list, repr=False)
    _block_inner: list[int | None] = field(default_factory=list, repr=False)
    _dom: list[int] = field(default_factory=list, repr=False)
    _preds: list[list[int]] = field(default_factory=list, repr=False)

    def block_index(self, index: int) -> int:
        """Index of the block holding instruction `index`."""
        return bisect.bisect_right(self._starts, index) - 1

    def loops_at(self, index: int) -> frozenset[int]:
        """Loops whose body holds instruction `index`."""
        return self._block_loops[self.block_index(index)]

    def innermost_loop(self, index: int) -> int | None:
        """Index of the deepest loop whose body holds instruction `index`."""
        return self._block_inner[self.block_index(index)]

    def in_loop(self, loop: int, index: int) -> bool:
        return self.block_index(index) in self.loops[loop].blocks


@dataclass
class AsmProgram:
    """All functions of one assembly text."""

    arch: str
    functions: list[AsmFunction]

    def function(self, name: str) -> AsmFunction:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def num_instructions(self) -> int:
        return sum(len(f.instructions) for f in self.functions)


class IRLoopLike(Protocol):
    extent: int
    kind: str
    depth: int


@dataclass(frozen=True)
class IRLoop:
    """A TIR loop in pre-order: extent, kind ("serial", "parallel", "vectorized", "unrolled"), nest depth."""

    extent: int
    kind: str
    depth: int
    name: str = ""


# ----------------------------------------------------------------------------------------------------------
# Line level parsing
# ----------------------------------------------------------------------------------------------------------

_LABEL_RE = re.compile(r"^\s*([A-Za-z_.$][\w.$@]*|\d+):")
_SYMBOL_RE = re.compile(r"(?<![%\w.$])([A-Za-z_.$][\w.$]*)")
_A64_LABEL_OPERAND_RE = re.compile(r"^[A-Za-z_.$][\w.$]*$")




def _build_x86_regs() -> dict[str, tuple[str, int]]:
    """Canonical name and vector width (0 for general purpose) of every x86-64 register spelling."""
    regs: dict[str, tuple[str, int]] = {}
    for r in ("ax", "bx", "cx", "dx"):
        canon = "r" + r
        for alias in (canon, "e" + r, r, r[0] + "l", r[0] + "h"):
            regs[alias] = (canon, 0)
    for r in ("si", "di", "bp", "sp"):
        canon = "r" + r
        for alias in (canon, "e" + r, r, r + "l"):
            regs[alias] = (canon, 0)
    for n in range(8, 16):
        canon = f"r{n}"
        for alias in (canon, canon + "d", canon + "w", canon + "b"):
            regs[alias] = (canon, 0)
    for n in range(32):
        regs[f"xmm{n}"] = (f"v{n}", 128)
        regs[f"ymm{n}"] = (f"v{n}", 256)
        regs[f"zmm{n}"] = (f"v{n}", 512)
    for n in range(8):
        regs[f"k{n}"] = (f"k{n}", 0)
    regs["rip"] = ("rip", 0)
    return regs


_X86_REGS = _build_x86_regs()

# x86 mnemonic families
_X86_INT_SUFFIX_RE = re.compile(
    r"^(add|sub|adc|sbb|and|or|xor|cmp|test|inc|dec|neg|not|shl|sal|shr|sar|rol|ror|imul|mul|idiv|div|lea|"
    r"mov|push|pop|bt|bts|btr|xchg|andn|popcnt|lzcnt|tzcnt|bsf|bsr|shlx|shrx|sarx|rorx|bzhi|blsr|blsi|"
    r"movabs|shld|shrd|nop)([bwlq]?)$"
)
_X86_MOVX_RE = re.compile(r"^mov[sz][bwl][wlq]$|^movslq$")
_X86_FLAG_WRITERS = frozenset(
    "add sub adc sbb and or xor cmp test inc dec neg shl sal shr sar rol ror imul mul idiv div bt bts btr "
    "andn popcnt lzcnt tzcnt bsf bsr blsr blsi bzhi shld shrd".split()
)
_X86_NO_DEST = frozenset(
    "cmp test bt push idiv div ptest vptest vtestps vtestpd ucomiss ucomisd comiss comisd vucomiss vucomisd "
    "vcomiss vcomisd vucomish vcomish kortestw kortestb kortestd kortestq ktestw ktestb ktestd ktestq".split()
)
_X86_FMA_RE = re.compile(r"^v?f(n)?m(add|sub|addsub|subadd)(132|213|231)?([ps])([sdh])$")
_X86_MAC_RE = re.compile(r"^vp(dpbusds?|dpwssds?|madd52[lh]uq)$")
_X86_BCAST_RE = re.compile(r"^v?(p?broadcast|movddup)")
_X86_VMOV_RE = re.compile(
    r"^v?(movups|movaps|movupd|movapd|movdq[au](8|16|32|64)?|movdqa(32|64)?|movnt(ps|pd|dq|dqa)|"
    r"p?maskmov[a-z]*|lddqu)$"
)
_X86_SMOV_RE = re.compile(r"^v?(movss|movsd|movsh|movd|movq|movw|movhps|movlps|movhpd|movlpd|extractps|"
                          r"pextr[bwdq]|pinsr[bwdq])$")
_X86_SHUFFLE_RE = re.compile(
    r"^v?(perm|shuf|unpck|punpck|insert|extract|blend|pblend|palignr|align[dq]|pshuf|movshdup|movsldup|"
    r"movhlps|movlhps|expand|compress|pexpand|pcompress|pack|pmov[sz]x|pmov[a-z]*[bwdq]$|pslldq|psrldq)"
)
_X86_SCALAR_FP_RE = re.compile(r"(ss|sd|sh)$|^v?u?comis[sdh]$|^v?cvtt?s[sdh]2")
X86_GATHER_RE = re.compile(r"^v(p)?gather")  # gathers (the list scheduler can price them by lane)
_X86_SCATTER_RE = re.compile(r"^v(p)?scatter")
_X86_ZERO_IDIOMS = frozenset("xor sub pxor xorps xorpd vpxor vxorps vxorpd vpxord vpxorq vpsubd vpsubq".split())
_X86_AVX_DEST_READ_RE = re.compile(r"^vperm[ti]2|^vpternlog|^vpdp|^vpmadd52|^v?f(n)?m(add|sub)")
_X86_LEGACY_WRITE_ONLY_RE = re.compile(
    r"^(mov|movabs|lea|pop|set|cvt|movs[bwl]|movz|popcnt|lzcnt|tzcnt|bsf|bsr|andn|shlx|shrx|sarx|rorx|bzhi|"
    r"blsr|blsi|pmov|sqrt|rcp|rsqrt|round|pshufd|pshufhw|pshuflw|movmsk|pmovmsk|extract|pextr)"
)
_X86_CC_REL = {
    "ne": "!=", "nz": "!=", "e": "==", "z": "==", "l": "<", "nge": "<", "b": "<", "nae": "<", "c": "<",
    "le": "<=", "ng": "<=", "be": "<=", "na": "<=", "g": ">", "nle": ">", "a": ">", "nbe": ">",
    "ge": ">=", "nl": ">=", "ae": ">=", "nb": ">=", "nc": ">=", "s": "<", "ns": ">=",
}


@dataclass
class _X86Operand:
    kind: str  # reg | imm | mem | label
    reg: str | None = None
    width: int = 0
    value: int | None = None
    base: str | None = None
    addr_regs: tuple[str, ...] = ()
    symbol: str | None = None
    mask: str | None = None
    zeroing: bool = False
    addr: tuple[str, str | None, int, int] | None = None  # (base, index, scale, displacement) when all are known


def _parse_int(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def _x86_operand(op: str) -> _X86Operand:
    decorations = re.findall(r"\{([^}]*)\}", op)
    core = re.sub(r"\s*\{[^}]*\}", "", op).strip().lstrip("*")
    mask, zeroing = None, False
    for d in decorations:
        d = d.strip()
        if d.startswith("%k"):
            mask = _X86_REGS.get(d[1:], (d[1:], 0))[0]
        elif d == "z":
            zeroing = True
    if core.startswith("$"):
        value = _parse_int(core[1:])
        return _X86Operand("imm", value=value, symbol=None if value is not None else core[1:])
    if core.startswith("%") and "(" not in core:
        name = core[1:]
        if ":" in name:  # segment override such as %fs:40 is memory
            return _X86Operand("mem", base=name.split(":")[0])
        canon, width = _X86_REGS.get(name, (name, 0))
        return _X86Operand("reg", reg=canon, width=width, mask=mask, zeroing=zeroing)
    if "(" in core:
        inner = core[core.index("(") + 1: core.rindex(")")]
        parts = [p.strip() for p in inner.split(",")]
        addr = tuple(_X86_REGS.get(p[1:], (p[1:], 0))[0] for p in parts[:2] if p.startswith("%"))
        base = addr[0] if addr else None
        sym_part = core[: core.index("(")]
        sym_match = _SYMBOL_RE.search(sym_part)
        symbol = sym_match.group(1).split("@")[0] if sym_match else None
        regs = tuple(r for r in addr if r != "rip")
        if base == "rip":
            base = symbol
        disp = _parse_int(sym_part.strip() or "0")
        scale = _parse_int(parts[2]) if len(parts) > 2 and parts[2] else 1
        form = None
        if base is not None and disp is not None and scale is not None and symbol is None:
            form = (base, addr[1] if len(addr) > 1 else None, scale, disp)
        return _X86Operand("mem", base=base, addr_regs=regs, symbol=symbol, addr=form)
    value = _parse_int(core)
    if value is not None:  # absolute address
        return _X86Operand("mem", base=None)
    return _X86Operand("label", symbol=core.split("@")[0])


def _x86_base_mnemonic(mn: str) -> str:
    m = _X86_INT_SUFFIX_RE.match(mn)
    if m:
        return m.group(1)
    if _X86_MOVX_RE.match(mn):
        return "movx"
    return mn


def _parse_x86(mn: str, ops_text: str, text: str) -> Instruction:
    ops = split_operands(ops_text)
    parsed = [_x86_operand(o) for o in ops]
    base = _x86_base_mnemonic(mn)
    reads: set[str] = set()
    writes: set[str] = set()
    for p in parsed:
        reads.update(p.addr_regs)
        if p.mask:
            reads.add(p.mask)
    vec_width = max((p.width for p in parsed if p.kind == "reg"), default=0)
    has_vec = vec_width > 0
    mem_ops = [i for i, p in enumerate(parsed) if p.kind == "mem"]
    last = len(parsed) - 1
    is_jump = mn.startswith("j")
    is_branch = is_jump or mn in ("call", "callq", "ret", "retq", "loop")
    target = None
    symbols: list[str] = []
    if is_branch:
        iclass = BRANCH
        if parsed:
            p = parsed[0]
            if p.kind == "label":
                target = p.symbol
            elif p.kind == "reg" and p.reg:
                reads.add(p.reg)
            elif p.kind == "mem" and p.symbol:
                target = p.symbol
        if is_jump and mn not in ("jmp", "jmpq"):
            reads.add(FLAGS)
        if mn.startswith("call"):
            writes.add("rax")
        if mn.startswith("ret") or mn.startswith("call"):
            reads.add("rsp")
        return Instruction(mn, ops, frozenset(reads), frozenset(writes), iclass, 0, False, False, None, target,
                           (), text)
    for p in parsed:
        if p.symbol and p.kind in ("mem", "imm", "label"):
            symbols.append(p.symbol)
    dest_is_mem = bool(mem_ops) and mem_ops[-1] == last and base not in _X86_NO_DEST
    mem_write = base == "push" or (dest_is_mem and (last > 0 or base in ("inc", "dec", "neg", "not")))
    mem_read = any(i != last or base in _X86_NO_DEST for i in mem_ops) or (
        bool(mem_ops) and mem_write and not _is_x86_write_only(mn, base, len(parsed)))
    if base == "lea":
        mem_read = mem_write = False
    if base == "pop":
        mem_read = True
    mem_base = mem_addr = None
    if mem_ops:
        mem_base, mem_addr = parsed[mem_ops[0]].base, parsed[mem_ops[0]].addr
    if base in ("push", "pop"):
        mem_base, mem_addr = "rsp", None
        reads.add("rsp")
        writes.add("rsp")
    iclass = _x86_class(mn, base, has_vec, mem_read, mem_write)
    width = vec_width if iclass in VECTOR_CLASSES else 0

    # registers read and written
    dest = parsed[last] if parsed else None
    if base in _X86_NO_DEST or base == "push" or (base in ("mul", "imul") and len(parsed) == 1):
        for p in parsed:
            if p.kind == "reg" and p.reg:
                reads.add(p.reg)
    else:
        for p in parsed[:-1]:
            if p.kind == "reg" and p.reg:
                reads.add(p.reg)
        if dest is not None and dest.kind == "reg" and dest.reg:
            writes.add(dest.reg)
            write_only = _is_x86_write_only(mn, base, len(parsed))
            if not write_only or (dest.mask and not dest.zeroing):
                reads.add(dest.reg)
            if _is_zero_idiom(mn, base, parsed):
                reads.discard(dest.reg)
    if base in _X86_FLAG_WRITERS or re.match(r"^v?u?comis|^v?ptest|^kortest|^ktest", mn):
        writes.add(FLAGS)
    if base in ("adc", "sbb") or mn.startswith("cmov") or mn.startswith("set"):
        reads.add(FLAGS)
    if mn in ("cltq", "cwtl", "cbtw"):
        reads.add("rax")
        writes.add("rax")
    elif mn in ("cltd", "cqto", "cwtd"):
        reads.add("rax")
        writes.add("rdx")
    elif base in ("idiv", "div") or (base in ("mul", "imul") and len(parsed) == 1):
        reads.update(("rax", "rdx"))
        writes.update(("rax", "rdx"))
    addr = frozenset(r for p in parsed for r in p.addr_regs)
    if base in ("push", "pop"):
        addr = frozenset(("rsp",))
    return Instruction(mn, ops, frozenset(reads), frozenset(writes), iclass, width, mem_read, mem_write,
                       mem_base, target, tuple(symbols), text, addr, base in ("push", "pop"), mem_addr)


def _is_x86_write_only(mn: str, base: str, nops: int) -> bool:
    """True when the destination register is not also a source (ignoring zero idioms and masks)."""
    if mn.startswith("v") or mn.startswith("k"):
        return not _X86_AVX_DEST_READ_RE.match(mn)
    if mn.startswith("cmov"):
        return False
    if base == "imul" and nops == 3:
        return True
    if base == "movx" or _X86_LEGACY_WRITE_ONLY_RE.match(base):
        return True
    return nops < 2 and base not in ("inc", "dec", "neg", "not", "bswap")


def _is_zero_idiom(mn: str, base: str, parsed: list[_X86Operand]) -> bool:
    if base not in _X86_ZERO_IDIOMS and mn not in _X86_ZERO_IDIOMS:
        return False
    srcs = [p.reg for p in parsed if p.kind == "reg"]
    return len(srcs) >= 2 and len(set(srcs)) == 1


def _x86_class(mn: str, base: str, has_vec: bool, mem_read: bool, mem_write: bool) -> str:
    fma = _X86_FMA_RE.match(mn)
    if fma:
        return VEC_FMA if fma.group(4) == "p" else SCALAR_FP
    if _X86_MAC_RE.match(mn):
        return VEC_FMA
    if has_vec or mn.startswith("v"):
        if _X86_BCAST_RE.match(mn):
            return BROADCAST
        if _X86_VMOV_RE.match(mn):
            return VEC_STORE if mem_write else VEC_LOAD if mem_read else VEC_MOVE
        if X86_GATHER_RE.match(mn):
            return VEC_LOAD
        if _X86_SCATTER_RE.match(mn):
            return VEC_STORE
        if _X86_SMOV_RE.match(mn):
            return SCALAR_STORE if mem_write else SCALAR_LOAD if mem_read else VEC_MOVE
        if _X86_SHUFFLE_RE.match(mn):
            return VEC_STORE if mem_write else SHUFFLE
        if _X86_SCALAR_FP_RE.search(mn):
            return SCALAR_FP
        if not has_vec:
            return OTHER  # e.g. vzeroupper, kmov between mask and gp registers
        return VEC_ARITH
    if base in ("push",):
        return SCALAR_STORE
    if base == "pop":
        return SCALAR_LOAD
    if base in ("mov", "movabs", "movx"):
        return SCALAR_STORE if mem_write else SCALAR_LOAD if mem_read else OTHER
    if mem_write:
        return SCALAR_STORE
    return OTHER


# AArch64 -------------------------------------------------------------------------------------------------

_A64_REG_RE = re.compile(r"^(?:([xw])(\d+)|([vqdshb])(\d+)(?:\.(\d*)([bhsdq]))?(?:\[\d+\])?|(sp|wsp)|(xzr|wzr))$")
_A64_ARR_BITS = {"b": 8, "h": 16, "s": 32, "d": 64, "q": 128}
_A64_SCALAR_BITS = {"q": 128, "d": 64, "s": 32, "h": 16, "b": 8}
_A64_BRANCHES = frozenset("b bl blr br ret cbz cbnz tbz tbnz".split())
_A64_NO_DEST = frozenset("cmp cmn tst fcmp fcmpe ccmp ccmn fccmp fccmpe prfm prfum".split())
_A64_DEST_READ = frozenset(
    "fmla fmls mla mls sdot udot usdot sudot smlal smlal2 umlal umlal2 smlsl smlsl2 umlsl umlsl2 bfdot fmlal "
    "fmlal2 fmlsl fmlsl2 smmla ummla usmmla bfmmla movk bfi bfxil bsl bit bif tbx ins usra ssra ursra srsra "
    "sli sri sqrdmlah sqrdmlsh sadalp uadalp saba uaba sabal uabal".split()
)
_A64_MAC = frozenset(
    "fmla fmls mla mls sdot udot usdot sudot smlal smlal2 umlal umlal2 smlsl smlsl2 umlsl umlsl2 bfdot "
    "fmlal fmlal2 fmlsl fmlsl2 smmla ummla usmmla bfmmla".split()
)
_A64_SHUFFLE = frozenset(
    "zip1 zip2 uzp1 uzp2 trn1 trn2 ext tbl tbx rev16 rev32 rev64 ins umov smov xtn xtn2 sqxtn sqxtn2 uqxtn "
    "uqxtn2 sxtl sxtl2 uxtl uxtl2".split()
)
_A64_FLAG_WRITERS = frozenset(
    "cmp cmn tst fcmp fcmpe ccmp ccmn fccmp fccmpe adds subs ands bics adcs sbcs negs".split()
)
_A64_FLAG_READERS = frozenset(
    "csel csinc csinv csneg cset csetm cinc cinv cneg fcsel adc sbc adcs sbcs ngc ccmp ccmn fccmp fccmpe".split()
)
_A64_CC_REL = {
    "ne": "!=", "eq": "==", "lt": "<", "lo": "<", "cc": "<", "mi": "<", "le": "<=", "ls": "<=",
    "gt": ">", "hi": ">", "ge": ">=", "hs": ">=", "cs": ">=", "pl": ">=",
}


@dataclass
class _A64Reg:
    canon: str | None  # None for the zero register
    kind: str  # gpr | vec
    bits: int  # arrangement width for v-regs with arrangement, scalar width for q/d/s/h/b
    arranged: bool  # vN.4s style (whole vector), False for lanes and scalar views
    lane: bool


def _a64_reg(tok: str) -> _A64Reg | None:
    m = _A64_REG_RE.match(tok)
    if not m:
        return None
    if m.group(1):
        return _A64Reg(f"r{m.group(2)}", "gpr", 64 if m.group(1) == "x" else 32, False, False)
    if m.group(7):
        return _A64Reg("sp", "gpr", 64, False, False)
    if m.group(8):
        return _A64Reg(None, "gpr", 64, False, False)
    letter, num, lanes, elem = m.group(3), m.group(4), m.group(5), m.group(6)
    canon = f"v{num}"
    lane = tok.endswith("]")
    if letter == "v":
        if lanes:
            return _A64Reg(canon, "vec", int(lanes) * _A64_ARR_BITS[elem], True, False)
        if elem:
            return _A64Reg(canon, "vec", _A64_ARR_BITS[elem], False, lane)
        return _A64Reg(canon, "vec", 128, True, False)
    return _A64Reg(canon, "vec", _A64_SCALAR_BITS[letter], False, False)


_A64_LANE_LIST_RE = re.compile(r"\}\s*\[\d+\]")
_A64_REG_TOKEN_RE = re.compile(r"(?<![\w.:#])([xwvqdshb]\d+(?:\.\d*[bhsdq])?(?:\[\d+\])?|w?sp|[xw]zr)(?![\w.])")


def _a64_regs_in(op: str) -> list[_A64Reg]:
    out = []
    for t in _A64_REG_TOKEN_RE.findall(op):
        r = _a64_reg(t)
        if r is not None:
            out.append(r)
    return out


def _parse_a64(mn: str, ops_text: str, text: str) -> Instruction:
    ops = split_operands(ops_text)
    reads: set[str] = set()
    writes: set[str] = set()
    base_mn = mn.split(".")[0]
    symbols: list[str] = []
    target = None
    if base_mn in _A64_BRANCHES:
        if mn.startswith("b.") or (base_mn == "b" and "." in mn):
            reads.add(FLAGS)
        for o in ops:
            r = _a64_reg(o)
            if r is not None:
                if r.canon:
                    reads.add(r.canon)
            elif _A64_LABEL_OPERAND_RE.match(o):
                target = o
        if base_mn in ("bl", "blr"):
            writes.add("r30")
        if base_mn == "ret":
            reads.add("r30")
        return Instruction(mn, ops, frozenset(reads), frozenset(writes), BRANCH, 0, False, False, None, target,
                           (), text)
    mem_idx = next((i for i, o in enumerate(ops) if o.startswith("[")), None)
    is_load = base_mn.startswith("ld") and mem_idx is not None
    is_store = base_mn.startswith("st") and mem_idx is not None
    mem_base = None
    addr_reads: set[str] = set()
    writeback = False
    if mem_idx is not None:
        addr = _a64_regs_in(ops[mem_idx])
        for r in addr:
            if r.canon:
                reads.add(r.canon)
                addr_reads.add(r.canon)
        base_reg = addr[0].canon if addr else None
        sym = re.search(r":([A-Za-z_.$][\w.$]*)", ops[mem_idx])
        mem_base = base_reg if base_reg else (sym.group(1) if sym else None)
        writeback = bool(base_reg) and (ops[mem_idx].endswith("!") or mem_idx < len(ops) - 1)
        if writeback and base_reg:
            writes.add(base_reg)
        for o in ops[mem_idx + 1:]:
            for r in _a64_regs_in(o):
                if r.canon:
                    reads.add(r.canon)
                    addr_reads.add(r.canon)
    for o in ops:
        for s in re.findall(r"(?:^|:)([A-Za-z_.$][\w.$]*)$", o):
            if _a64_reg(s) is None and not re.match(r"^(lsl|lsr|asr|ror|[su]xt[bhwx]|msl)$", s) \
                    and s not in _A64_CC_REL and s not in ("al", "nv"):
                symbols.append(s)
    data_ops = ops[:mem_idx] if mem_idx is not None else ops
    data_regs = [_a64_regs_in(o) for o in data_ops]
    flat = [r for rs in data_regs for r in rs]
    vec_regs = [r for r in flat if r.kind == "vec"]
    arranged_bits = max((r.bits for r in vec_regs if r.arranged), default=0)
    first = flat[0] if flat else None

    lane_list = any(_A64_LANE_LIST_RE.search(o) for o in data_ops)  # { v0.s }[1]
    if is_load:
        dests = flat
        lane_load = lane_list or any(r.lane for r in dests)
        for r in dests:
            if r.canon:
                writes.add(r.canon)
                if lane_load:
                    reads.add(r.canon)
        if re.match(r"^ld[1-4]r$", base_mn):
            iclass, width = BROADCAST, arranged_bits
        elif re.match(r"^ld[1-4]$", base_mn):
            iclass, width = (SCALAR_LOAD, 0) if lane_load else (VEC_LOAD, arranged_bits)
        elif first is not None and first.kind == "vec" and first.bits == 128:
            iclass, width = VEC_LOAD, 128
        else:
            iclass, width = SCALAR_LOAD, 0
        return Instruction(mn, ops, frozenset(reads), frozenset(writes), iclass, width, True, False, mem_base,
                           None, tuple(symbols), text, frozenset(addr_reads), writeback)
    if is_store:
        for r in flat:
            if r.canon:
                reads.add(r.canon)
        if re.match(r"^st[1-4]$", base_mn):
            lane_store = lane_list or any(r.lane for r in flat)
            iclass, width = (SCALAR_STORE, 0) if lane_store else (VEC_STORE, arranged_bits)
        elif first is not None and first.kind == "vec" and first.bits == 128:
            iclass, width = VEC_STORE, 128
        else:
            iclass, width = SCALAR_STORE, 0
        return Instruction(mn, ops, frozenset(reads), frozenset(writes), iclass, width, False, True, mem_base,
                           None, tuple(symbols), text, frozenset(addr_reads), writeback)

    no_dest = base_mn in _A64_NO_DEST
    for i, r in enumerate(flat):
        if not r.canon:
            continue
        if i == 0 and not no_dest:
            writes.add(r.canon)
            if base_mn in _A64_DEST_READ or (base_mn == "mov" and r.lane):
                reads.add(r.canon)
        else:
            reads.add(r.canon)
    if base_mn in _A64_FLAG_WRITERS:
        writes.add(FLAGS)
    if base_mn in _A64_FLAG_READERS:
        reads.add(FLAGS)

    dest_arranged = first is not None and first.kind == "vec" and first.arranged
    if base_mn in _A64_MAC:
        iclass = VEC_FMA if dest_arranged else SCALAR_FP
    elif base_mn in ("fmadd", "fmsub", "fnmadd", "fnmsub"):
        iclass = SCALAR_FP
    elif base_mn == "dup" and dest_arranged:
        iclass = BROADCAST
    elif base_mn in _A64_SHUFFLE or (base_mn == "mov" and any(r.lane for r in vec_regs)):
        iclass = SHUFFLE
    elif base_mn == "mov" and dest_arranged and len(vec_regs) == 2 and all(r.arranged for r in vec_regs):
        iclass = VEC_MOVE
    elif arranged_bits and any(r.arranged for r in vec_regs):
        iclass = VEC_ARITH
    elif vec_regs or base_mn.startswith("f"):
        iclass = SCALAR_FP
    else:
        iclass = OTHER
    width = arranged_bits if iclass in VECTOR_CLASSES else 0
    return Instruction(mn, ops, frozenset(reads), frozenset(writes), iclass, width, False, False, mem_base, None,
                       tuple(symbols), text)


_LINE_CACHE: dict[tuple[str, str], Instruction] = {}
_LINE_CACHE_LIMIT = 200_000


def parse_instruction(line: str, arch: str) -> Instruction:
    """Parse one instruction line (no label, no comment). Cached per text: kernels repeat lines a lot."""
    key = (arch, line)
    inst = _LINE_CACHE.get(key)
    if inst is not None:
        return inst
    parts = line.split(None, 1)
    mn = parts[0].lower()
    ops_text = parts[1].strip() if len(parts) > 1 else ""
    if arch == "x86":
        if mn in ("lock", "rep", "repz", "repnz", "notrack", "data16") and ops_text:
            sub = ops_text.split(None, 1)
            mn, ops_text = sub[0].lower(), (sub[1] if len(sub) > 1 else "")
        inst = _parse_x86(mn, ops_text, line)
    else:
        inst = _parse_a64(mn, ops_text, line)
    if len(_LINE_CACHE) > _LINE_CACHE_LIMIT:
        _LINE_CACHE.clear()
    _LINE_CACHE[key] = inst
    return inst


# ----------------------------------------------------------------------------------------------------------
# Program level parsing: sections, functions, blocks, loops, references
# ----------------------------------------------------------------------------------------------------------

_X86_MNEMONIC_RE = re.compile(r"^[a-z][a-z0-9]*$")
_A64_MNEMONIC_RE = re.compile(r"^[a-z][a-z0-9]*(\.[a-z]{2})?$")


_ENCODING_PREFIX_RE = re.compile(r"^(\s*)\{(?:vex|vex2|vex3|evex|disp8|disp32)\}\s*")


def _strip_comment(line: str, arch: str) -> str:
    """The code part of a line; x86 encoding hints such as `{vex}` (AVX-VNNI) are dropped too."""
    i = line.find("#" if arch == "x86" else "//")
    line = line if i < 0 else line[:i]
    return _ENCODING_PREFIX_RE.sub(r"\1", line) if arch == "x86" else line


_TYPE_FUNCTION_RE = re.compile(r"^\s*\.type\s+([^,\s]+)\s*,\s*[@%]function", re.M)
_GLOBL_RE = re.compile(r"^\s*\.glob(?:a)?l\s+(\S+)", re.M)
_SECTION_DIRECTIVES = (".section", ".text", ".data", ".bss", ".rodata", ".pushsection", ".popsection")


_SECTION_LINE_RE = re.compile(r"^[ \t]*\.(?:section|text|data|bss|rodata|pushsection|popsection)\b.*$", re.M)


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines in code sections; data and debug sections are skipped whole."""
    out: list[tuple[int, str]] = []
    in_text, stack, pos, lineno = True, [], 0, 1
    for m in _SECTION_LINE_RE.finditer(text):
        if in_text:
            out.extend(enumerate(text[pos:m.start()].split("\n"), lineno))
        lineno += text.count("\n", pos, m.end())
        in_text = _switch_section(m.group(0).strip(), in_text, stack)
        pos = m.end()
    if in_text:
        out.extend(enumerate(text[pos:].split("\n"), lineno))
    return out


def _switch_section(line: str, in_text: bool, stack: list[bool]) -> bool:
    """Whether the lines after the section directive `line` are code."""
    if line.startswith(".pushsection"):
        stack.append(in_text)
        return bool(_is_text_section(".section " + line.split(None, 1)[1]))
    if line.startswith(".popsection"):
        return stack.pop() if stack else in_text
    switched = _is_text_section(line)
    return in_text if switched is None else switched


def _is_text_section(directive: str) -> bool | None:
    """True/False when `directive` switches to a code/non-code section, None when it does not switch."""
    d = directive.split(None, 1)
    name = d[0]
    if name == ".text":
        return True
    if name in (".data", ".bss", ".rodata"):
        return False
    if name == ".section" and len(d) > 1:
        args = d[1].split(",")
        sec = args[0].strip().strip('"')
        if sec.startswith(".text"):
            return True
        flags = args[1].strip().strip('"') if len(args) > 1 else ""
        return "x" in flags
    return None


def parse_asm(text: str, arch: str) -> AsmProgram:
    """Parse assembly text into functions, basic blocks and loops (with trip counts where recoverable).

    Raises `AsmParseError` for text with no instructions, unknown architecture, or lines that are not
    instructions of `arch`.
    """
    if arch not in ARCHES:
        raise AsmParseError(f"unknown architecture {arch!r}; expected one of {ARCHES}")
    if not isinstance(text, str) or not text.strip():
        raise AsmParseError("empty assembly text")
    typed_functions = set(_TYPE_FUNCTION_RE.findall(text))
    globals_ = set(_GLOBL_RE.findall(text))
    use_types = bool(typed_functions)
    mn_re = _X86_MNEMONIC_RE if arch == "x86" else _A64_MNEMONIC_RE

    functions: list[AsmFunction] = []
    cur: AsmFunction | None = None
    for lineno, raw in _code_lines(text):
        line = raw.strip()
        if not line:
            continue
        c = line[0]
        if c == "." and (":" not in line or line.startswith(".Ltmp") or _LABEL_RE.match(line) is None):
            continue  # directive, or a debug-info label (never a branch target)
        if c == "#" or line.startswith("//"):
            continue
        line = _strip_comment(line, arch).strip()
        while line:
            m = _LABEL_RE.match(line)
            if not m:
                break
            label = m.group(1)
            line = line[m.end():].strip()
            starts_function = label in typed_functions if use_types else not label.startswith(".L")
            if starts_function:
                cur = AsmFunction(label, arch, [], {}, is_global=label in globals_ or not use_types)
                functions.append(cur)
            elif cur is not None:
                cur.labels[label] = len(cur.instructions)
            elif label.startswith(".LBB"):
                cur = AsmFunction(label, arch, [], {}, is_global=True)
                functions.append(cur)
        if not line or line[0] == ".":
            continue
        mnemonic = line.split(None, 1)[0].lower()
        if not mn_re.match(mnemonic):
            raise AsmParseError(f"line {lineno}: not an {arch} instruction: {raw.strip()!r}")
        if cur is None:
            cur = AsmFunction("<anonymous>", arch, [], {}, is_global=True)
            functions.append(cur)
        try:
            inst = parse_instruction(line, arch)
        except (ValueError, IndexError, KeyError) as e:
            raise AsmParseError(f"line {lineno}: cannot parse {raw.strip()!r}: {e}") from e
        cur.instructions.append(inst)
    functions = [f for f in functions if f.instructions]
    if not functions:
        raise AsmParseError("no instructions found in the assembly text")
    _check_arch(functions, arch)
    names = {f.name for f in functions}
    for f in functions:
        _build_blocks(f)
        _find_loops(f)
        f.calls = [(i, s) for i, inst in enumerate(f.instructions)
                   for s in ((inst.target,) if inst.target else inst.symbols) if s in names and s != f.name]
        _index_writes(f)
        for li, lp in enumerate(f.loops):
            lp.trip = _infer_trip(f, li)
    return AsmProgram(arch, functions)


def _check_arch(functions: list[AsmFunction], arch: str) -> None:
    """Reject text of the other architecture early: its register spellings never show up as registers."""
    insts = [i for f in functions for i in f.instructions]
    with_regs = sum(1 for i in insts if i.reads or i.writes)
    if insts and with_regs == 0 and len(insts) > 3:
        raise AsmParseError(f"no {arch} registers found in {len(insts)} instructions: wrong architecture?")


def _build_blocks(f: AsmFunction) -> None:
    insts = f.instructions
    targets = {i.target for i in insts if i.target}
    starts = {0}
    by_index: dict[int, str] = {}
    for label, idx in f.labels.items():
        if idx not in by_index or label in targets:
            by_index.setdefault(idx, label)
            if label in targets:
                by_index[idx] = label
                starts.add(idx)
    for i, inst in enumerate(insts):
        if inst.is_branch and i + 1 < len(insts):
            starts.add(i + 1)
    starts_sorted = sorted(s for s in starts if s < len(insts))
    blocks = []
    for k, s in enumerate(starts_sorted):
        e = starts_sorted[k + 1] if k + 1 < len(starts_sorted) else len(insts)
        label = f.name if s == 0 else by_index.get(s, f"{f.name}+{s}")
        blocks.append(BasicBlock(label, s, e, tuple(insts[s:e])))
    f.blocks = blocks


def _successors(f: AsmFunction) -> list[list[int]]:
    """Control-flow successors of each block (fall-through and branch targets inside the function)."""
    block_at = {b.start: k for k, b in enumerate(f.blocks)}
    succs: list[list[int]] = []
    for k, b in enumerate(f.blocks):
        last = b.instructions[-1]
        out = []
        if last.is_branch and last.target in f.labels and f.labels[last.target] in block_at:
            out.append(block_at[f.labels[last.target]])
        if not (last.is_branch and _ends_flow(last, f.arch)) and k + 1 < len(f.blocks):
            out.append(k + 1)
        succs.append(out)
    return succs


def _ends_flow(inst: Instruction, arch: str) -> bool:
    """Unconditional jump or return: no fall-through."""
    mn = inst.mnemonic
    if arch == "x86":
        return mn in ("jmp", "jmpq", "ret", "retq")
    return mn in ("b", "br", "ret")


def _dominators(succs: list[list[int]]) -> list[int]:
    """Dominator sets as bit masks (iterative data flow over reverse post-order); unreachable: 0."""
    n = len(succs)
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, ss in enumerate(succs):
        for b in ss:
            preds[b].append(a)
    order, seen, stack = [], [False] * n, [(0, iter(succs[0]))] if n else []
    if n:
        seen[0] = True
    while stack:
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            order.append(node)
            stack.pop()
        elif not seen[nxt]:
            seen[nxt] = True
            stack.append((nxt, iter(succs[nxt])))
    rpo = order[::-1]
    full = (1 << n) - 1
    dom = [full if seen[k] else 0 for k in range(n)]
    if n:
        dom[0] = 1
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            new = full
            for p in preds[b]:
                if seen[p]:
                    new &= dom[p]
            new |= 1 << b
            if new != dom[b]:
                dom[b] = new
                changed = True
    return dom


def _find_loops(f: AsmFunction) -> None:
    """Natural loops. Tuna takes a branch to a label above it as a back edge; here an edge is a back edge
    when its target dominates its source: this drops blocks that LLVM's block placement shares between
    paths, and keeps loops entered by a jump into their middle (header below part of the body)."""
    f._starts = [b.start for b in f.blocks]
    succs = _successors(f)
    dom = _dominators(succs)
    preds: list[list[int]] = [[] for _ in f.blocks]
    for a, ss in enumerate(succs):
        for b in ss:
            preds[b].append(a)
    bodies: dict[int, set[int]] = {}
    latch_of: dict[int, int] = {}
    latch_blocks: dict[int, list[int]] = {}
    for k, ss in enumerate(succs):
        for h in ss:
            if dom[k] >> h & 1:
                body = bodies.setdefault(h, {h})
                work = [k]
                while work:
                    x = work.pop()
                    if x not in body:
                        body.add(x)
                        work.extend(preds[x])
                latch_of[h] = max(latch_of.get(h, -1), f.blocks[k].end - 1)
                latch_blocks.setdefault(h, []).append(k)
    heads = sorted(bodies)
    loops = [AsmLoop(f.blocks[h].start, latch_of[h], frozenset(bodies[h]), tuple(latch_blocks[h])) for h in heads]
    head_block = {i: h for i, h in enumerate(heads)}
    for i, lp in enumerate(loops):
        outer = [j for j, o in enumerate(loops) if j != i and head_block[i] in o.blocks]
        if outer:
            lp.parent = min(outer, key=lambda j: len(loops[j].blocks))
    for i, lp in enumerate(loops):
        d, p = 0, lp.parent
        while p is not None:
            d, p = d + 1, loops[p].parent
        lp.depth = d
        if lp.parent is not None:
            loops[lp.parent].children.append(i)
    f.loops = loops
    f._dom, f._preds = dom, preds
    block_loops, inner = [], []
    for k in range(len(f.blocks)):
        ls = frozenset(i for i, lp in enumerate(loops) if k in lp.blocks)
        block_loops.append(ls)
        inner.append(max(ls, key=lambda i: loops[i].depth) if ls else None)
    f._block_loops = block_loops
    f._block_inner = inner


def _index_writes(f: AsmFunction) -> None:
    writes: dict[str, list[int]] = {}
    for i, inst in enumerate(f.instructions):
        for r in inst.writes:
            writes.setdefault(r, []).append(i)
    f._writes = writes


# ----------------------------------------------------------------------------------------------------------
# Trip counts from the assembly: induction register, step, initial value and bound
# ----------------------------------------------------------------------------------------------------------

_Value = tuple[object, int]  # (symbolic part or None, constant offset)
_MIRROR = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "!=": "!=", "==": "=="}
_NEGATE = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "!=": "==", "==": "!="}


def _writes_in(f: AsmFunction, reg: str, loop: int) -> list[int]:
    """Indices of instructions of loop `loop` writing `reg`."""
    return [w for w in f._writes.get(reg, ()) if f.in_loop(loop, w)]


def _value_before(f: AsmFunction, pos: int, reg: str, depth: int = 0, outside: int | None = None) -> _Value | None:
    """Value of `reg` on entry to instruction `pos` as (symbol, constant), from the last write above it
    (skipping writes inside loop `outside`, for the value on entry to that loop).

    A write inside a loop that does not also contain `pos` has an unknown final value: gives None.
    """
    if depth > 8:
        return None
    lst = f._writes.get(reg, [])
    k = bisect.bisect_left(lst, pos) - 1
    while outside is not None and k >= 0 and f.in_loop(outside, lst[k]):
        k -= 1
    if k < 0:
        return (("entry", reg), 0)
    w = lst[k]
    outside = f.loops_at(w) - f.loops_at(pos)
    if outside:
        # the value left by a finished loop: its induction register after `trip` steps
        li = f.innermost_loop(w)
        lp = f.loops[li] if li is not None else None
        if (lp is None or outside != {li} or lp.iv != reg or lp.iv_write != w or lp.trip is None
                or lp.iv_start is None):
            return None
        return (lp.iv_start[0], lp.iv_start[1] + lp.trip * lp.iv_step)
    inst = f.instructions[w]
    return _eval_write(f, w, inst, reg, depth)


def _eval_write(f: AsmFunction, w: int, inst: Instruction, reg: str, depth: int) -> _Value | None:
    mn, ops = inst.mnemonic, inst.operands
    if f.arch == "x86":
        base = _x86_base_mnemonic(mn)
        if base in ("mov", "movabs") and len(ops) == 2:
            src = _x86_operand(ops[0])
            if src.kind == "imm" and src.value is not None:
                return (None, src.value)
            if src.kind == "reg" and src.reg:
                return _value_before(f, w, src.reg, depth + 1)
            return None
        if base in ("xor", "sub") and len(ops) == 2 and ops[0] == ops[1]:
            return (None, 0)
        if base == "lea" and len(ops) == 2:
            src = _x86_operand(ops[0])
            if len(src.addr_regs) == 1 and src.symbol is None:
                disp = ops[0][: ops[0].index("(")].strip()
                d = _parse_int(disp) if disp else 0
                v = _value_before(f, w, src.addr_regs[0], depth + 1)
                if v is not None and d is not None:
                    return (v[0], v[1] + d)
            return None
        step = _x86_step(inst, reg)
        if step is not None:
            v = _value_before(f, w, reg, depth + 1)
            return None if v is None else (v[0], v[1] + step)
        return None
    base = mn.split(".")[0]
    regs = [_a64_reg(o) for o in ops]
    if base in ("mov", "movz", "orr") and len(ops) >= 2:
        if base == "orr" and not (len(ops) == 3 and regs[1] is not None and regs[1].canon is None):
            return None
        src_text = ops[-1] if base == "orr" else ops[1]
        imm = _a64_imm(src_text, ops[2:] if base in ("mov", "movz") else ())
        if imm is not None:
            return (None, imm)
        src = _a64_reg(src_text)
        if src is not None:
            if src.canon is None:
                return (None, 0)
            if src.kind == "gpr":
                return _value_before(f, w, src.canon, depth + 1)
        return None
    if base == "movk" and len(ops) >= 2:
        imm = _a64_imm(ops[1], ())
        shift = _a64_shift(ops[2:])
        old = _value_before(f, w, reg, depth + 1)
        if imm is None or old is None or old[0] is not None:
            return None
        return (None, (old[1] & ~(0xFFFF << shift)) | (imm << shift))
    if base in ("add", "sub") and len(ops) >= 3 and regs[1] is not None and regs[1].canon:
        imm = _a64_imm(ops[2], ops[3:])
        if imm is None:
            return None
        v = _value_before(f, w, regs[1].canon, depth + 1)
        if v is None:
            return None
        return (v[0], v[1] + (imm if base == "add" else -imm))
    return None


def _a64_shift(rest: Sequence[str]) -> int:
    for r in rest:
        m = re.match(r"^lsl\s+#(\d+)$", r.strip())
        if m:
            return int(m.group(1))
    return 0


def _a64_imm(text: str, rest: Sequence[str]) -> int | None:
    text = text.strip()
    if not text.startswith("#"):
        return None
    v = _parse_int(text[1:])
    if v is None:
        return None
    return v << _a64_shift(rest)


def _x86_step(inst: Instruction, reg: str) -> int | None:
    """Constant added to `reg` by `inst` (add/sub/inc/dec/lea r, k(r)), or None."""
    base = _x86_base_mnemonic(inst.mnemonic)
    ops = inst.operands
    if base in ("inc", "dec") and len(ops) == 1:
        return 1 if base == "inc" else -1
    if base in ("add", "sub") and len(ops) == 2:
        src, dst = _x86_operand(ops[0]), _x86_operand(ops[1])
        if dst.kind == "reg" and dst.reg == reg and src.kind == "imm" and src.value is not None:
            return src.value if base == "add" else -src.value
    if base == "lea" and len(ops) == 2:
        src, dst = _x86_operand(ops[0]), _x86_operand(ops[1])
        if dst.reg == reg and src.addr_regs == (reg,) and src.symbol is None:
            disp = ops[0][: ops[0].index("(")].strip()
            return _parse_int(disp) if disp else 0
    return None


def _a64_step(inst: Instruction, reg: str) -> int | None:
    base = inst.mnemonic.split(".")[0]
    ops = inst.operands
    if base in ("add", "sub", "adds", "subs") and len(ops) >= 3:
        d, s = _a64_reg(ops[0]), _a64_reg(ops[1])
        if d and s and d.canon == reg and s.canon == reg:
            imm = _a64_imm(ops[2], ops[3:])
            if imm is not None:
                return imm if base.startswith("add") else -imm
    return None


def _compare_of(f: AsmFunction, li: int) -> tuple[str, str, int, object, bool] | None:
    """The continue test of loop `li` as (induction register, relation, flag-setter index, bound, bottom).

    `bound` is an int, or a register name whose value is looked up before the loop. The relation is written
    `induction REL bound` and holds while the loop continues. `bottom` is False when the test sits in the
    header (tested before each iteration).
    """
    lp, arch = f.loops[li], f.arch
    branch_idx = lp.latch
    latch = f.instructions[branch_idx]
    header_block = f.block_index(lp.header)
    negate = False
    if not (latch.is_branch and latch.target in f.labels and f.labels[latch.target] == lp.header
            and not _ends_flow(latch, arch)):
        # unconditional back edge: the loop is left by a single conditional exit, taken (jump out) or not
        # taken (fall out of the loop)
        exits = []
        for k in sorted(lp.blocks):
            i = f.blocks[k].end - 1
            inst = f.instructions[i]
            if not inst.is_branch or _ends_flow(inst, arch) or inst.target not in f.labels:
                continue
            target_in = f.block_index(f.labels[inst.target]) in lp.blocks
            fall_in = k + 1 in lp.blocks
            if target_in != fall_in:
                exits.append((i, not target_in))
        if len(exits) != 1:
            return None
        branch_idx, negate = exits[0]
        latch = f.instructions[branch_idx]
    bottom = f.block_index(branch_idx) != header_block or len(lp.blocks) == 1
    mn = latch.mnemonic
    if arch == "aarch64" and mn in ("cbz", "cbnz"):
        r = _a64_reg(latch.operands[0])
        if r is None or r.canon is None:
            return None
        rel = "!=" if mn == "cbnz" else "=="
        return (r.canon, _NEGATE[rel] if negate else rel, branch_idx, 0, bottom)
    if arch == "x86":
        rel = _X86_CC_REL.get(mn[1:]) if mn.startswith("j") else None
    else:
        rel = _A64_CC_REL.get(mn[2:]) if mn.startswith("b.") else None
    if rel is None:
        return None
    rel = _NEGATE[rel] if negate else rel
    setter = None
    for i in range(branch_idx - 1, f.blocks[f.block_index(branch_idx)].start - 1, -1):
        if FLAGS in f.instructions[i].writes:
            setter = i
            break
    if setter is None:
        return None
    lhs, rhs = _compare_sides(f.instructions[setter], arch)
    if lhs is None:
        return None
    # put the induction register (the side written inside the loop) on the left
    lhs_written = isinstance(lhs, str) and bool(_writes_in(f, lhs, li))
    rhs_written = isinstance(rhs, str) and bool(_writes_in(f, rhs, li))
    if rhs_written and not lhs_written:
        lhs, rhs, rel = rhs, lhs, _MIRROR[rel]
    elif not lhs_written or rhs_written:
        return None
    return (lhs, rel, setter, rhs, bottom)


def _compare_sides(inst: Instruction, arch: str) -> tuple[object, object]:
    """(lhs, rhs) compared by a flag-setting instruction: register names or ints; (None, None) if unknown."""
    ops = inst.operands
    if arch == "x86":
        base = _x86_base_mnemonic(inst.mnemonic)
        if base == "cmp" and len(ops) == 2:
            src, dst = _x86_operand(ops[0]), _x86_operand(ops[1])
            if dst.kind != "reg":
                return None, None
            if src.kind == "imm" and src.value is not None:
                return dst.reg, src.value
            if src.kind == "reg":
                return dst.reg, src.reg
            return None, None
        if base == "test" and len(ops) == 2 and ops[0] == ops[1]:
            r = _x86_operand(ops[0])
            return (r.reg, 0) if r.kind == "reg" else (None, None)
        if base in ("add", "sub", "inc", "dec") and ops:
            dst = _x86_operand(ops[-1])
            return (dst.reg, 0) if dst.kind == "reg" else (None, None)
        return None, None
    base = inst.mnemonic
    if base in ("cmp", "cmn") and len(ops) >= 2:
        a = _a64_reg(ops[0])
        if a is None or a.canon is None:
            return None, None
        imm = _a64_imm(ops[1], ops[2:])
        if imm is not None:
            return a.canon, (imm if base == "cmp" else -imm)
        b = _a64_reg(ops[1])
        if base == "cmp" and b is not None and b.canon and len(ops) == 2:
            return a.canon, b.canon
        return None, None
    if base in ("subs", "adds") and ops:
        d = _a64_reg(ops[0])
        return (d.canon, 0) if d is not None and d.canon else (None, None)
    return None, None


def _solve_trip(first: int, step: int, bound: int, rel: str, bottom: bool) -> int | None:
    """Iterations of a loop whose compared value is `first`, `first+step`, ... and continues while REL bound.

    `bottom`: the test follows the body (do-while, as LLVM rotates loops); else it precedes it.
    """
    if step == 0:
        return None
    s: int | None  # tests passed before the first failing one
    if rel == "!=":
        diff = bound - first
        s = diff // step if diff % step == 0 and diff // step >= 0 else None
    elif rel == "==":
        s = 0 if first != bound else 1
    elif rel == "<":
        s = max(0, -((first - bound) // step)) if step > 0 else (0 if first >= bound else None)
    elif rel == "<=":
        s = max(0, (bound - first) // step + 1) if step > 0 else (0 if first > bound else None)
    elif rel == ">":
        s = max(0, -((bound - first) // -step)) if step < 0 else (0 if first <= bound else None)
    elif rel == ">=":
        s = max(0, (first - bound) // -step + 1) if step < 0 else (0 if first < bound else None)
    else:
        return None
    if s is None:
        return None
    return s + 1 if bottom else s


def induction_step(f: AsmFunction, li: int) -> int | None:
    """The constant step of the register that loop `li`'s exit test reads, stepped once per iteration, also when
    the loop's bounds are not constants (a parallel body's chunk loop); None when it is not such a register."""
    cmp = _compare_of(f, li)
    if cmp is None:
        return None
    ind = cmp[0]
    writes = _writes_in(f, ind, li)
    if len(writes) != 1 or f.innermost_loop(writes[0]) != li:
        return None
    return (_x86_step if f.arch == "x86" else _a64_step)(f.instructions[writes[0]], ind) or None


def _infer_trip(f: AsmFunction, li: int) -> int | None:
    """Trip count of loop `li` from its induction register, step, initial value and bound, or None."""
    cmp = _compare_of(f, li)
    if cmp is None:
        return None
    ind, rel, setter, bound, bottom = cmp
    lp = f.loops[li]
    writes = _writes_in(f, ind, li)
    step_of = _x86_step if f.arch == "x86" else _a64_step
    if len(writes) != 1:
        # a duplicated latch steps the induction register once on each path: one write per latch block
        wb = sorted(f.block_index(x) for x in writes)
        if wb != sorted(lp.latches) or len({step_of(f.instructions[x], ind) for x in writes}) != 1:
            return None
    w = max(writes, key=lambda x: x <= setter) if len(writes) > 1 else writes[0]
    if f.block_index(w) != f.block_index(setter) and len(writes) > 1:
        w = next((x for x in writes if f.block_index(x) == f.block_index(setter)), w)
    if f.innermost_loop(w) != li:
        return None
    step = step_of(f.instructions[w], ind)
    if not step:
        return None
    init = _value_before(f, lp.header, ind, outside=li)
    if init is None:
        return None
    if isinstance(bound, str):
        bval = _value_before(f, lp.header, bound, outside=li)
        if bval is None or bval[0] != init[0]:
            return None
        bound_c = bval[1]
    else:
        if init[0] is not None:
            return None
        bound_c = int(bound)
    # does the step happen before the test within one iteration?
    if f.block_index(w) == f.block_index(setter):
        stepped = w <= setter
    else:
        stepped = bottom
    first = init[1] + (step if stepped else 0)
    trip = _solve_trip(first, step, bound_c, rel, bottom)
    if trip is None or trip <= 0 or trip > 1 << 40:
        return None
    lp.top_tested = not bottom
    lp.iv, lp.iv_step, lp.iv_write = ind, step, w
    lp.iv_init = init[1] if init[0] is None else None
    lp.iv_start = init
    return trip


_Adjust = tuple[tuple[int, ...], int]  # (loops, executions per full run of their iterations)
_Term = tuple[int, "int | None"]  # (loop, the iteration index at which the test holds, None: never)


def _rare_blocks(f: AsmFunction) -> dict[int, list[_Adjust]]:
    """Blocks behind a branch on `induction == constant` (or several inductions all zero), such as the
    `k == 0` initialisation LLVM keeps inside a reduction loop. Maps block -> [(loops, executions)]: the
    block runs `executions` times per run of all iterations of `loops`, not on every iteration.
    """
    out: dict[int, list[_Adjust]] = {}
    for k, b in enumerate(f.blocks):
        last = f.instructions[b.end - 1]
        if not f._block_loops[k] or not last.is_branch or _ends_flow(last, f.arch) or last.target not in f.labels:
            continue
        guard = _iv_guard(f, k, b.end - 1)
        if guard is None:
            continue
        terms, equal_side_taken = guard
        loops = tuple(sorted({li for li, _ in terms}))
        if len(loops) != len(terms):
            continue
        total, hits = 1, 1
        for li, n in terms:
            trip = f.loops[li].trip or 0
            total *= trip
            hits *= 1 if n is not None and 0 <= n < trip else 0
        target = f.block_index(f.labels[last.target])
        equal_side, other_side = (target, k + 1) if equal_side_taken else (k + 1, target)
        body = frozenset.intersection(*(f.loops[li].blocks for li in loops))
        headers = {f.block_index(f.loops[li].header) for li in loops}
        for side, times in ((equal_side, hits), (other_side, total - hits)):
            if side not in body or f._preds[side] != [k] or side in headers:
                continue
            for kk in body:
                if f._dom[kk] >> side & 1:
                    out.setdefault(kk, []).append((loops, times))
    return out


_UNSIGNED_SETCC = frozenset({"setb", "seta", "setbe", "setae", "setc", "setnc", "setnae", "setnbe"})
_STRICT_SETCC = frozenset({"setb", "seta", "setc", "setnae", "setnbe"})  # (start below the other's end: overlap)


def _bit_location(op: str) -> str | None:
    """Where a flag byte lives: a register's canonical name, or a stack slot's text (other memory: None)."""
    parsed = _x86_operand(op)
    if parsed.kind == "reg":
        return parsed.reg
    return op.strip() if parsed.kind == "mem" and "%rsp" in op else None


def _alias_check_branches(f: AsmFunction, more_shapes: bool = False) -> dict[int, set[int]]:
    """Branches to the side a runtime overlap test of address ranges takes on a conflict: that side's block -> the
    blocks ending in such a branch. A test is `jne` after `test`/`and`/`or` of bytes that all hold unsigned
    comparisons of two 64-bit values (`cmpq` then `setb`...), followed through registers and stack slots. With
    `more_shapes` (`MapConfig.more_alias_checks`) the comparisons' sense is followed: strict ones (`setb`, `seta`)
    find an overlap, so their `jne` takes the conflict and their `je` falls into it; non-strict ones (`setae`, then
    `orb`) find the ranges apart, the other way round. Also a pointer distance against the vector's bytes: `subq` of
    two registers, then `cmpq $64` and `jb` (conflict taken) or `cmpq $63` and `ja` (conflict falls through)."""
    pointer_bits: dict[str, bool] = {}  # registers and stack slots holding such comparisons -> do they find overlap?
    flags_compare = flags_checked = False  # flags from a 64-bit compare / from an and, or, test of pointer bits
    checked_overlap = True  # the sense of the pointer bits tested last
    distance_flags: int | None = None  # the constant a pointer distance was just compared with
    memo: dict[tuple[int, str], bool] = {}
    out: dict[int, set[int]] = {}
    for pos, inst in enumerate(f.instructions):
        mn, ops = inst.mnemonic, inst.operands
        if pointer_bits or (flags_compare and mn in _UNSIGNED_SETCC):  # else nothing to follow (most instructions)
            base = _x86_base_mnemonic(mn)
            writes_dest = inst.writes - {FLAGS} or inst.mem_write or mn.startswith("set")  # (a setcc to memory too)
            written = _bit_location(ops[-1]) if ops and writes_dest else None
            if mn in _UNSIGNED_SETCC and written is not None:
                if flags_compare:
                    pointer_bits[written] = mn in _STRICT_SETCC or not more_shapes
                else:
                    pointer_bits.pop(written, None)
            elif base in ("and", "or", "test") and len(ops) == 2:
                senses = {pointer_bits.get(_bit_location(op)) for op in ops}
                both = None not in senses and (len(senses) == 1 or not more_shapes)
                if base != "test" and written is not None:
                    if both:
                        pointer_bits[written] = senses.pop()
                    else:
                        pointer_bits.pop(written, None)
                elif both:
                    checked_overlap = senses.pop()
                flags_checked, flags_compare, distance_flags = both, False, None
                continue
            elif mn.startswith("mov") and len(ops) == 2 and written is not None and inst.iclass not in VECTOR_CLASSES:
                source = pointer_bits.get(_bit_location(ops[0]))
                if source is not None:
                    pointer_bits[written] = source
                else:
                    pointer_bits.pop(written, None)
            elif written is not None:
                pointer_bits.pop(written, None)
            for reg in inst.writes - {FLAGS}:
                if reg != written:
                    pointer_bits.pop(reg, None)
        if FLAGS in inst.writes:
            flags_compare = mn == "cmpq" and not any(op.startswith("$") for op in ops)
            flags_checked = False
            distance_flags = _distance_compare(f, pos, memo) if more_shapes else None
        if not (inst.is_branch and inst.target in f.labels):
            continue
        taken, fall = f.block_index(f.labels[inst.target]), f.block_index(pos) + 1
        conflict = None
        if mn in ("jne", "jnz") and flags_checked:
            conflict = taken if checked_overlap else fall
        elif more_shapes and mn in ("je", "jz") and flags_checked:
            conflict = fall if checked_overlap else taken
        elif distance_flags is not None and (mn, distance_flags & 1) in _DISTANCE_BRANCHES:
            conflict = taken if _DISTANCE_BRANCHES[mn, distance_flags & 1] else fall
            source = f.block_index(pos)
            if conflict >= len(f.blocks) or not f._block_loops[source] <= f._block_loops[conflict]:
                conflict = None  # a loop's exit (a count down to a vector's bytes), not a scalar version
        if conflict is not None and conflict < len(f.blocks):
            out.setdefault(conflict, set()).add(f.block_index(pos))
    return out


# (branch, the compared constant odd) of a pointer distance test -> is the conflict (distance below the vector's
# bytes) the taken side? `cmpq $64; jb` and `cmpq $63; jbe` take it; `cmpq $64; jae` and `cmpq $63; ja` fall into it
_DISTANCE_BRANCHES = {("jb", 0): True, ("jnae", 0): True, ("jc", 0): True, ("jbe", 1): True, ("jna", 1): True,
                      ("jae", 0): False, ("jnb", 0): False, ("jnc", 0): False, ("ja", 1): False, ("jnbe", 1): False}


def _writes_location(inst: Instruction, loc: str) -> bool:
    """Does `inst` write `loc`, a register's canonical name or a stack slot's text (`_bit_location`)?"""
    if "(" in loc:
        return inst.mem_write and bool(inst.operands) and inst.operands[-1].strip() == loc
    return loc in inst.writes


def _reaching_writes(f: AsmFunction, pos: int, loc: str) -> list[int] | None:
    """Positions of the writes of `loc` that reach instruction `pos` along the control flow (the last one above it in
    its block, else the last one of each path back through the predecessors); None where a path reaches the function's
    entry without one (an argument)."""
    k = f.block_index(pos)
    for i in range(pos - 1, f.blocks[k].start - 1, -1):
        if _writes_location(f.instructions[i], loc):
            return [i]
    found: set[int] = set()
    seen: set[int] = set()
    stack = list(f._preds[k])
    if not stack:
        return None
    while stack:
        b = stack.pop()
        if b in seen:
            continue
        seen.add(b)
        blk = f.blocks[b]
        for i in range(blk.end - 1, blk.start - 1, -1):
            if _writes_location(f.instructions[i], loc):
                found.add(i)
                break
        else:
            if not f._preds[b]:
                return None
            stack.extend(f._preds[b])
    return sorted(found)


def _holds_distance(f: AsmFunction, pos: int, loc: str, memo: dict[tuple[int, str], bool], depth: int = 0) -> bool:
    """Does `loc` hold a pointer distance on entry to instruction `pos`, whichever path led there: a difference of two
    64-bit registers (`subq`), or such a distance plus or minus offsets (`addq`, `subq`, `leaq` with it as base or
    index, `movq` through stack slots), as LLVM offsets one distance for each copy it checks, and rotates distances
    through registers around a loop (a cycle back to this value adds nothing against it)."""
    key = (pos, loc)
    if key not in memo:
        memo[key] = True
        writes = _reaching_writes(f, pos, loc) if depth < 8 else None
        memo[key] = bool(writes) and all(_writes_distance(f, w, memo, depth + 1) for w in writes)
    return memo[key]


def _writes_distance(f: AsmFunction, w: int, memo: dict[tuple[int, str], bool], depth: int) -> bool:
    """Does instruction `w` write a pointer distance (`_holds_distance`)?"""
    inst = f.instructions[w]
    mn, ops = inst.mnemonic, inst.operands
    if len(ops) != 2:
        return False
    if mn == "subq" and all(_x86_operand(op).kind == "reg" for op in ops):
        return True
    if mn in ("addq", "subq"):
        sources = [_bit_location(op) for op in ops]
    elif mn == "leaq":
        sources = list(_x86_operand(ops[0]).addr_regs)
    elif mn == "movq":
        sources = [_bit_location(ops[0])]
    else:
        return False
    return any(loc is not None and _holds_distance(f, w, loc, memo, depth) for loc in sources)


def _distance_compare(f: AsmFunction, pos: int, memo: dict[tuple[int, str], bool]) -> int | None:
    """The constant of `cmpq $C, distance` at `pos` when C or C + 1 is a vector's bytes (16 to 512), else None."""
    ops = f.instructions[pos].operands
    if f.instructions[pos].mnemonic != "cmpq" or len(ops) != 2 or not ops[0].startswith("$"):
        return None
    value = _parse_int(ops[0][1:])
    if value is None:
        return None
    bytes_ = value + (value & 1)
    if not (16 <= bytes_ <= 512 and bytes_ & (bytes_ - 1) == 0):
        return None
    loc = _bit_location(ops[1])
    return value if loc is not None and _holds_distance(f, pos, loc, memo) else None


def _alias_check_fallbacks(f: AsmFunction, more_shapes: bool = False) -> frozenset[int]:
    """Blocks that run only when a runtime alias check fails: LLVM's loop vectorizer guards its vector loop with
    overlap tests of the address ranges it reads and writes when it cannot prove that buffers are distinct (TVM's
    intermediate buffers), and branches to a scalar copy of the loop on a conflict. TVM's buffers never overlap, so
    the copy never runs (x86 only). `more_shapes`: see `_alias_check_branches`; the conflict side may then also be
    the header of the scalar loop itself (its back edges are not entries)."""
    if f.arch != "x86":
        return frozenset()
    dead: set[int] = set()
    for target, sources in _alias_check_branches(f, more_shapes).items():
        entries = {p for p in f._preds[target] if not (more_shapes and f._dom[p] >> target & 1)}
        if entries <= sources:
            dead.update(kk for kk in range(len(f.blocks)) if f._dom[kk] >> target & 1)
    return frozenset(dead)


def _iv_guard(f: AsmFunction, k: int, bi: int) -> tuple[list[_Term], bool] | None:
    """For the conditional branch at `bi` ending block `k`: (tests that must all hold, branch taken when
    they hold), or None when the condition is not an equality on induction registers."""
    branch = f.instructions[bi]
    mn = branch.mnemonic
    if f.arch == "aarch64" and mn in ("cbz", "cbnz"):
        r = _a64_reg(branch.operands[0])
        terms = _iv_terms(f, k, bi, r.canon, 0) if r is not None and r.canon else []
        return (terms, mn == "cbz") if terms else None
    rel = (_X86_CC_REL.get(mn[1:]) if mn.startswith("j") else None) if f.arch == "x86" else (
        _A64_CC_REL.get(mn[2:]) if mn.startswith("b.") else None)
    if rel not in ("==", "!="):
        return None
    for i in range(bi - 1, f.blocks[k].start - 1, -1):
        inst = f.instructions[i]
        if FLAGS not in inst.writes:
            continue
        if f.arch == "x86" and _x86_base_mnemonic(inst.mnemonic) == "or" and len(inst.operands) == 2:
            src, dst = _x86_operand(inst.operands[0]), _x86_operand(inst.operands[1])
            if src.kind == "reg" and dst.kind == "reg":
                t1, t2 = _iv_terms(f, k, i, src.reg, 0), _iv_terms(f, k, i, dst.reg, 0)
                return (t1 + t2, rel == "==") if t1 and t2 else None
            return None
        lhs, rhs = _compare_sides(inst, f.arch)
        if isinstance(lhs, str) and isinstance(rhs, int):
            terms = _iv_terms(f, k, i, lhs, rhs)
            return (terms, rel == "==") if terms else None
        return None
    return None


def _iv_terms(f: AsmFunction, k: int, pos: int, reg: str, value: int, depth: int = 0) -> list[_Term]:
    """`reg == value` at `pos` in block `k` as tests on iteration indices [(loop, index or None)].

    `reg` may be an affine function of the iteration index of one loop; for value 0 it may also be the
    bitwise or of several such registers (`k0 == 0 and k1 == 0`). [] when it is neither.
    """
    if depth > 6:
        return []
    j = _last_write_in_block(f, k, pos, reg)
    if j == -1:
        return []
    if value == 0 and j is not None:
        inst = f.instructions[j]
        base = inst.mnemonic.split(".")[0] if f.arch == "aarch64" else _x86_base_mnemonic(inst.mnemonic)
        srcs = sorted(r for r in inst.reads if r != FLAGS)
        if base in ("or", "orr") and 1 <= len(srcs) <= 2 and not inst.mem_read:
            terms: list[_Term] = []
            for r in srcs:
                t = _iv_terms(f, f.block_index(j), j, r, 0, depth + 1)
                if not t:
                    return []
                terms += t
            return terms
    aff = _iv_affine(f, k, pos, reg, depth + 1)
    if aff is None or aff[1] == 0:
        return []
    li, a, b = aff
    n, r = divmod(value - b, a)
    return [(li, n if r == 0 else None)]


def _step_iv(f: AsmFunction, k: int, pos: int, reg: str) -> tuple[int, int, int] | None:
    """`reg` as (loop, a, b) = a * iteration + b when an enclosing loop steps it by a constant once per
    iteration (its only write there) from a constant initial value."""
    for li in sorted(f._block_loops[k], key=lambda i: -f.loops[i].depth):
        lp = f.loops[li]
        ws = _writes_in(f, reg, li)
        if not ws:
            continue
        if lp.trip is None:
            return None
        if lp.iv == reg and lp.iv_init is not None:
            w, step, init = lp.iv_write, lp.iv_step, (None, lp.iv_init)
        else:
            if len(ws) != 1 or f.innermost_loop(ws[0]) != li:
                return None
            w = ws[0]
            step = (_x86_step if f.arch == "x86" else _a64_step)(f.instructions[w], reg)
            init = _value_before(f, lp.header, reg, outside=li) if step else None
            if init is None or init[0] is not None:
                return None
        kw = f.block_index(w)
        stepped = (kw == k and w < pos) or (kw != k and bool(f._dom[k] >> kw & 1))
        return (li, step, init[1] + (step if stepped else 0))
    return None


def _last_write_in_block(f: AsmFunction, k: int, pos: int, reg: str) -> int | None:
    """The write of `reg` that reaches `pos` in block `k`: the last one above it in the block, else the last
    one of the single block writing `reg` in the innermost enclosing loop that writes it, if that block
    dominates `k` and is no induction step. None when `reg` is an induction register here or no enclosing
    loop writes it; -1 when the reaching write is not known."""
    for j in range(pos - 1, f.blocks[k].start - 1, -1):
        if reg in f.instructions[j].writes:
            return j
    if _step_iv(f, k, pos, reg) is not None:
        return None
    li = f._block_inner[k]
    while li is not None:
        ws = _writes_in(f, reg, li)
        if ws:
            kb = f.block_index(ws[0])
            if kb != k and f.block_index(ws[-1]) == kb and f._dom[k] >> kb & 1:
                return ws[-1]
            return -1
        li = f.loops[li].parent
    return None


def _iv_affine(f: AsmFunction, k: int, pos: int, reg: str, depth: int) -> tuple[int, int, int] | None:
    """`reg` at `pos` in block `k` as (loop, a, b): reg = a * (iteration index of loop) + b, or None."""
    if depth > 8:
        return None
    j = _last_write_in_block(f, k, pos, reg)
    if j is None or (j >= 0 and _is_step_of(f, j, reg)):
        return _step_iv(f, k, pos, reg)
    if j == -1:
        return None
    inst = f.instructions[j]
    ops = inst.operands
    kj = f.block_index(j)

    def scaled(src: str, mul: int, add: int) -> tuple[int, int, int] | None:
        v = _iv_affine(f, kj, j, src, depth + 1)
        return None if v is None else (v[0], v[1] * mul, v[2] * mul + add)

    if f.arch == "x86":
        base = _x86_base_mnemonic(inst.mnemonic)
        if len(ops) != 2:
            return None
        src, dst = _x86_operand(ops[0]), _x86_operand(ops[1])
        if base == "mov" and src.kind == "reg" and src.reg:
            return scaled(src.reg, 1, 0)
        if base in ("add", "sub", "shl") and src.kind == "imm" and src.value is not None and dst.reg == reg:
            if base == "shl":
                return scaled(reg, 1 << src.value, 0)
            return scaled(reg, 1, src.value if base == "add" else -src.value)
        if base == "lea" and src.kind == "mem" and src.symbol is None and "(" in ops[0]:
            inner = ops[0][ops[0].index("(") + 1: ops[0].rindex(")")].split(",")
            disp_text = ops[0][: ops[0].index("(")].strip()
            disp = _parse_int(disp_text) if disp_text else 0
            base_r = _X86_REGS.get(inner[0].strip()[1:], (None, 0))[0] if inner[0].strip() else None
            idx_r = _X86_REGS.get(inner[1].strip()[1:], (None, 0))[0] if len(inner) > 1 else None
            scale = _parse_int(inner[2].strip()) if len(inner) > 2 else 1
            if disp is None or scale is None:
                return None
            vals = [scaled(r, m, 0) for r, m in ((base_r, 1), (idx_r, scale)) if r]
            if not vals or any(v is None for v in vals) or len({v[0] for v in vals}) != 1:
                return None
            return (vals[0][0], sum(v[1] for v in vals), sum(v[2] for v in vals) + disp)
        return None
    base = inst.mnemonic
    regs = [_a64_reg(o) for o in ops]
    if base == "mov" and len(ops) == 2 and regs[1] is not None and regs[1].canon:
        return scaled(regs[1].canon, 1, 0)
    if base in ("add", "sub") and len(ops) >= 3 and regs[1] is not None and regs[1].canon:
        imm = _a64_imm(ops[2], ops[3:])
        if imm is not None:
            return scaled(regs[1].canon, 1, imm if base == "add" else -imm)
    if base == "lsl" and len(ops) == 3 and regs[1] is not None and regs[1].canon:
        imm = _a64_imm(ops[2], ())
        if imm is not None:
            return scaled(regs[1].canon, 1 << imm, 0)
    return None


def _is_step_of(f: AsmFunction, j: int, reg: str) -> bool:
    return (_x86_step if f.arch == "x86" else _a64_step)(f.instructions[j], reg) is not None


# ----------------------------------------------------------------------------------------------------------
# Algorithm 1: mapping assembly loops to IR loops
# ----------------------------------------------------------------------------------------------------------

HIDDEN_KINDS = frozenset({"vectorized", "unrolled"})
PARALLEL_BODY = "__tvm_parallel_lambda"  # TVM's name for the outlined body of a parallel loop


def _visible(lp: IRLoopLike) -> bool:
    """Can this IR loop be an assembly loop? Not when vectorized, unrolled, or of extent 1."""
    return lp.kind not in HIDDEN_KINDS and int(lp.extent) > 1


@dataclass(frozen=True)
class MapConfig:
    """Knobs of the loop matcher."""

    max_unroll: int = 64  # largest LLVM unroll factor accepted when an IR extent is a multiple of the trip
    # runtime alias checks of more shapes leave their scalar versions out of the counts (`_alias_check_branches`)
    more_alias_checks: bool = False
    default_trip: int = 1  # trip used for a loop with no recoverable bounds and no IR loop (counted fallback)


@dataclass
class LoopMatch:
    """An assembly loop and the IR loop it was matched with (`ir_index` into the given IR list)."""

    function: str
    loop: int
    ir_index: int | None
    asm_trip: int | None
    trip: int
    source: str  # "asm": trip from the assembly; "ir": from the matched IR extent; "default": fallback;
    # "duplicate": another top-level loop of a parallel body, counted once
    how: str  # "exact", "unrolled", "peeled", "nesting", "none", "duplicate"


@dataclass
class LoopMapping:
    """Result of Algorithm 1: one `LoopMatch` per assembly loop (pre-order over the call tree)."""

    matches: list[LoopMatch]
    ir_loops: list[IRLoopLike]
    unmatched_ir: list[int]  # visible IR loops no assembly loop was matched to (fully unrolled by LLVM)
    fallbacks: int  # assembly loops whose trip count did not come from the assembly
    _by_key: dict[tuple[str, int], LoopMatch] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_key = {(m.function, m.loop): m for m in self.matches}

    def match(self, function: str, loop: int) -> LoopMatch:
        return self._by_key[(function, loop)]

    def trip(self, function: str, loop: int) -> int:
        return self._by_key[(function, loop)].trip


def _reachable_order(program: AsmProgram) -> tuple[list[tuple[AsmFunction, int, tuple[str, int] | None]],
                                                    dict[str, tuple[str, int] | None], list[str]]:
    """Assembly loops in pre-order over the call tree, each with its parent loop across functions.

    A function referenced from inside a loop (e.g. the parallel lambda launched from `main_compute_`) is
    placed under the innermost loop around the reference. Returns the order, the context (caller loop) of
    each reached function, and the reached functions in visiting order.
    """
    by_name = {f.name: f for f in program.functions}
    referenced = {callee for f in program.functions for _, callee in f.calls}
    roots = [f for f in program.functions if f.is_global and f.name not in referenced]
    if not roots:
        roots = [f for f in program.functions if f.name not in referenced] or program.functions[:1]
    order: list[tuple[AsmFunction, int, tuple[str, int] | None]] = []
    context: dict[str, tuple[str, int] | None] = {}
    visited: list[str] = []

    def visit(f: AsmFunction, ctx: tuple[str, int] | None) -> None:
        context[f.name] = ctx
        visited.append(f.name)
        events: list[tuple[int, int, object]] = [(lp.header, 0, i) for i, lp in enumerate(f.loops)]
        events += [(site, 1, callee) for site, callee in f.calls]
        for pos, kind, what in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == 0:
                lp = f.loops[what]
                parent = (f.name, lp.parent) if lp.parent is not None else ctx
                order.append((f, what, parent))
            elif what not in context:
                inner = f.innermost_loop(pos)
                visit(by_name[what], (f.name, inner) if inner is not None else ctx)

    for r in roots:
        if r.name not in context:
            visit(r, None)
    return order, context, visited


def _ir_tree(ir_loops: Sequence[IRLoopLike]) -> tuple[list[int], dict[int, int | None], dict[int, int], list[bool]]:
    """Kept (assembly-visible) IR loops in pre-order, the kept parent of each, subtree ends, and per IR loop
    whether it is a parallel loop or nested in one."""
    kept: list[int] = []
    parent: dict[int, int | None] = {}
    in_parallel: list[bool] = []
    stack: list[int] = []  # indices into ir_loops
    for i, lp in enumerate(ir_loops):
        while stack and ir_loops[stack[-1]].depth >= lp.depth:
            stack.pop()
        in_parallel.append(lp.kind == "parallel" or (bool(stack) and in_parallel[stack[-1]]))
        if _visible(lp):
            kp = next((j for j in reversed(stack) if _visible(ir_loops[j])), None)
            parent[i] = kp
            kept.append(i)
        stack.append(i)
    end: dict[int, int] = {}
    for i in kept:
        j = i + 1
        while j < len(ir_loops) and ir_loops[j].depth > ir_loops[i].depth:
            j += 1
        end[i] = j  # subtree of i is ir indices (i, j)
    return kept, parent, end, in_parallel


def map_loops(program: AsmProgram, ir_loops: Sequence[IRLoopLike], config: MapConfig | None = None) -> LoopMapping:
    """Tuna Algorithm 1: match assembly loops to the TIR loops of the scheduled program.

    `ir_loops` lists the TIR loops in pre-order with extent, kind and depth. Vectorized and unrolled loops
    are not assembly loops. An assembly loop is matched to an IR loop below the IR loop of its parent
    assembly loop, preferring an equal iteration bound, then an extent that is a multiple of the trip (LLVM
    unrolled it) or one more (peeled); loops whose bounds are not constants (parallel chunk loops) fall back
    to nesting order. Several assembly loops may map to one IR loop when LLVM duplicated it (full unrolling
    of an outer loop, versioning).
    """
    cfg = config or MapConfig()
    ir = list(ir_loops)
    kept, ir_parent, ir_end, in_parallel_ir = _ir_tree(ir)
    pos_of = {i: p for p, i in enumerate(kept)}
    order, context, _ = _reachable_order(program)
    matched: dict[tuple[str, int], int | None] = {}
    matches: list[LoopMatch] = []
    pointer = 0
    used: set[int] = set()
    fallbacks = 0
    defaults: list[str] = []
    lambda_loop: dict[str, int | None] = {}  # parallel body -> the parallel IR loop of its first top-level loop
    for f, li, parent in order:
        lp = f.loops[li]
        top_of_lambda = parent is None and PARALLEL_BODY in f.name and lp.parent is None
        if top_of_lambda and lp.trip is None and lambda_loop.get(f.name) is not None:
            # a parallel body runs one parallel IR loop: another top-level loop of unknown bounds is the remainder of
            # LLVM's runtime unrolling of the chunk loop (or another version of it), run a few times per chunk. Not
            # the next parallel loop, which belongs to the next body.
            best = lambda_loop[f.name]
            matched[(f.name, li)] = best
            matches.append(LoopMatch(f.name, li, best, None, 1, "duplicate", "duplicate"))
            fallbacks += 1
            continue
        q = matched.get(parent) if parent is not None else None
        if parent is not None and q is None:
            # parent unmatched: look for the nearest matched ancestor
            anc = parent
            while anc is not None and matched.get(anc) is None:
                pf = program.function(anc[0])
                pl = pf.loops[anc[1]].parent
                anc = (anc[0], pl) if pl is not None else None
            q = matched.get(anc) if anc is not None else None
        if q is not None:
            cands = [i for i in kept if q < i < ir_end[q]]
        else:
            cands = list(kept)
        if top_of_lambda:
            par = [i for i in cands if ir[i].kind == "parallel"]
            cands = par or cands
        # TVM outlines every parallel loop into a parallel body: code outside one runs only loops outside them (a
        # peeled copy of a serial copy loop must not match a parallel nest launched after it), and the reverse
        in_body = _runs_in_parallel_body(f.name, context)
        cands = [i for i in cands if in_parallel_ir[i] == in_body] or cands
        best, how = _pick(lp.trip, cands, ir, pos_of, pointer, q, ir_parent, cfg)
        if top_of_lambda and f.name not in lambda_loop:
            lambda_loop[f.name] = best if best is not None and ir[best].kind == "parallel" else None
        if best is None:
            trip = lp.trip if lp.trip is not None else cfg.default_trip
            source = "asm" if lp.trip is not None else "default"
        else:
            pointer = max(pointer, pos_of[best] + 1)
            used.add(best)
            trip = lp.trip if lp.trip is not None else int(ir[best].extent)
            source = "asm" if lp.trip is not None else "ir"
        if source != "asm":
            fallbacks += 1
            if source == "default":
                defaults.append(f"{f.name}#{li}")
        matched[(f.name, li)] = best
        matches.append(LoopMatch(f.name, li, best, lp.trip, trip, source, how))
    if defaults:
        log.info("%d assembly loop(s) with no constant bounds and no IR loop, trip %d assumed: %s",
                    len(defaults), cfg.default_trip, ", ".join(defaults))
    unmatched = [i for i in kept if i not in used]
    return LoopMapping(matches, ir, unmatched, fallbacks)


def _runs_in_parallel_body(fname: str, context: Mapping[str, tuple[str, int] | None]) -> bool:
    """Does function `fname` run inside a parallel body (it is one, or is called from inside one)?"""
    ctx = context.get(fname)
    return PARALLEL_BODY in fname or (ctx is not None and _runs_in_parallel_body(ctx[0], context))


def _pick(trip: int | None, cands: list[int], ir: list[IRLoopLike], pos_of: dict[int, int], pointer: int,
          q: int | None, ir_parent: dict[int, int | None], cfg: MapConfig) -> tuple[int | None, str]:
    """Best IR candidate for an assembly loop with `trip` (None: unknown) and its kind of match."""
    ahead = [i for i in cands if pos_of[i] >= pointer]
    behind = sorted((i for i in cands if pos_of[i] < pointer), key=lambda i: -pos_of[i])
    ordered = ahead + behind
    if trip is None:
        direct = [i for i in ordered if ir_parent.get(i) == q]
        pick = (direct or ordered or [None])[0]
        return pick, ("nesting" if pick is not None else "none")
    for how, ok in (
        ("exact", lambda e: e == trip),
        ("unrolled", lambda e: e % trip == 0 and 1 < e // trip <= cfg.max_unroll),
        ("peeled", lambda e: e - 1 == trip),
    ):
        for i in ordered:
            if ok(int(ir[i].extent)):
                return i, how
    return None, "none"


# ----------------------------------------------------------------------------------------------------------
# Counting executed instructions
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockExec:
    """A basic block and how many times it executes in one run of the program (all threads together)."""

    function: str
    block: BasicBlock
    executions: int
    loop_body: bool = False  # the block is the whole body of its innermost loop
    parallel: bool = False  # the block runs inside a parallel-for body (spread over the cores)


@dataclass
class InstructionCounts:
    """Executed instructions of the whole program, per class and per (class, vector width)."""

    total: int
    by_class: dict[str, int]
    by_class_width: dict[tuple[str, int], int]
    folded_loads: int  # memory sources folded into arithmetic (each is also a load)
    blocks: list[BlockExec]
    invocations: dict[str, int]
    fallbacks: int

    def get(self, iclass: str, width: int | None = None) -> int:
        if width is None:
            return self.by_class.get(iclass, 0)
        return self.by_class_width.get((iclass, width), 0)


def count_instructions(program: AsmProgram, mapping: LoopMapping | None = None,
                       config: MapConfig | None = None) -> InstructionCounts:
    """Count executed instructions: each block weighted by the trips of its enclosing loops (across the
    call tree) times the invocations of its function. Functions never referenced from an exported function
    (e.g. unused fp16 helpers) count zero, and so do the scalar versions behind runtime alias checks."""
    more_alias_checks = (config or MapConfig()).more_alias_checks
    if mapping is None:
        mapping = map_loops(program, [])
    _, context, visited = _reachable_order(program)
    loop_factor: dict[tuple[str, int], int] = {}

    def factor(fname: str, li: int | None) -> int:
        """Product of trips of loop `li` of `fname` and all its ancestors, across functions."""
        if li is None:
            return 1
        key = (fname, li)
        v = loop_factor.get(key)
        if v is None:
            f = program.function(fname)
            lp = f.loops[li]
            outer = factor(fname, lp.parent) if lp.parent is not None else _ctx_factor(fname)
            v = mapping.trip(fname, li) * outer
            loop_factor[key] = v
        return v

    def _ctx_factor(fname: str) -> int:
        ctx = context.get(fname)
        return factor(ctx[0], ctx[1]) if ctx is not None else 1

    invocations = {name: _ctx_factor(name) for name in visited}
    blocks: list[BlockExec] = []
    for fname in visited:
        f = program.function(fname)
        rare = _rare_blocks(f)
        never = _alias_check_fallbacks(f, more_alias_checks)
        for k, b in enumerate(f.blocks):
            inner = f.innermost_loop(b.start)
            n = factor(fname, inner) if inner is not None else _ctx_factor(fname)
            if k in never:
                n = 0
            if inner is not None and f.loops[inner].top_tested and f.block_index(f.loops[inner].header) == k:
                trip = mapping.trip(fname, inner)
                n = n // trip * (trip + 1)
            for loops, times in rare.get(k, ()):
                whole = 1
                for li in loops:
                    whole *= mapping.trip(fname, li)
                n = n // whole * times
            body = inner is not None and f.loops[inner].blocks == frozenset((k,))
            blocks.append(BlockExec(fname, b, n, body, _runs_in_parallel_body(fname, context)))
    return tally_blocks(blocks, invocations, mapping.fallbacks)


def tally_blocks(blocks: list[BlockExec], invocations: dict[str, int], fallbacks: int) -> InstructionCounts:
    """Executed instructions per class and per (class, width) of `blocks`, each run `executions` times."""
    by_class: dict[str, int] = dict.fromkeys(CLASSES, 0)
    by_cw: dict[tuple[str, int], int] = {}
    folded = 0
    for b in blocks:
        for inst in b.block.instructions:
            by_class[inst.iclass] += b.executions
            key = (inst.iclass, inst.width)
            by_cw[key] = by_cw.get(key, 0) + b.executions
            if inst.folded_load:
                folded += b.executions
    return InstructionCounts(sum(by_class.values()), by_class, by_cw, folded, blocks, invocations, fallbacks)


def analyze_asm(text: str, arch: str, ir_loops: Sequence[IRLoopLike] = (),
                config: MapConfig | None = None) -> tuple[AsmProgram, LoopMapping, InstructionCounts]:
    """Parse, map and count in one call. Raises only `AsmParseError`, also for assembly whose structure
    defeats the analysis (an internal error is reported as such, with its cause chained)."""
    try:
        prog = parse_asm(text, arch)
        mapping = map_loops(prog, ir_loops, config)
        return prog, mapping, count_instructions(prog, mapping, config)
    except AsmParseError:
        raise
    except (ValueError, IndexError, KeyError, AttributeError, TypeError, RecursionError) as e:
        raise AsmParseError(f"assembly analysis failed: {type(e).__name__}: {e}") from e
