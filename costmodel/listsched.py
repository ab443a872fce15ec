"""Instruction-level parallelism feature (Tuna, section III-A.3): a small out-of-order list scheduler.

Each basic block is scheduled on its own: instructions are dispatched in order at most `issue_width` per
cycle into a bounded reorder window, start when their operands are ready (true dependences through
registers and, conservatively, through memory with the same base register), optionally (Tuna's rule,
off by default since cores rename registers) never before an earlier instruction they have a false
dependence (WAR, WAW) with, and occupy a pipe of their class for
`rthroughput * pipes` cycles. The cycles to finish the block, times its executions, summed over blocks, is
the ILP cost of the program.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from drytune.costmodel.asm import (
    BROADCAST,
    CLASSES,
    SCALAR_LOAD,
    SCALAR_STORE,
    SHUFFLE,
    VEC_LOAD,
    VEC_STORE,
    X86_GATHER_RE,
    BlockExec,
    Instruction,
    InstructionCounts,
)
from drytune.target import HardwareSpec

TABLE_DIR = Path(__file__).with_name("tables")
_TABLE_FILES = {"x86": "x86.json", "aarch64": "aarch64.json"}


class TableError(ValueError):
    """A latency table is missing, malformed, or lacks a class the scheduler needs."""


@dataclass(frozen=True)
class Timing:
    """How one instruction executes: result latency, pipe pool, cycles it holds one pipe."""

    latency: int
    resource: str
    occupancy: int


@dataclass(frozen=True)
class SchedConfig:
    """Knobs of the list scheduler."""

    window: int | None = None  # reorder window in instructions; None: the profile's ROB size
    max_block_instructions: int = 256  # longer blocks: schedule this many, scale by length
    # WAR/WAW order starts, as Tuna does (no renaming). Off: cores rename registers, and LLVM reuses one
    # temporary for every broadcast of a register tile, which Tuna's rule serialises (GEMM top-1 0.35 -> 1.0,
    # median top-10 0.73 -> 0.77 over the Zen 3 fidelity data, leave-one-operator-out).
    false_dependences: bool = False
    memory_dependences: bool = True  # loads/stores through the same base register are ordered
    # With `memory_dependences`: order only accesses of one address form (same base and index registers, not
    # written in between, same scale) whose bytes overlap, as a core's memory-dependence predictor lets a load
    # pass earlier stores it has not aliased. Off: every access through the base register is ordered, which
    # serializes a register tile kept in memory (28 accumulator chains of MetaSchedule's 7 x 7 x 1280 1x1
    # convolution scheduled one after another: 6.7x its cycles).
    disambiguate_addresses: bool = True
    steady_state: bool = False  # for a block that is a whole loop body, cycles per iteration in steady state
    # A load whose bytes overlap an earlier store without lying inside it (a masked tail's store reaching into the
    # next row) cannot take its value from the store buffer: it waits until the store has retired and is written
    # to L1, this many cycles after its retirement. Addresses are followed across constant pointer steps (`add $k`),
    # so that a steady-state copy meets the previous iteration's stores. 0: such loads are forwarded like the others
    failed_forward_cycles: int = 0
    # With `failed_forward_cycles`: a load overlapping an earlier masked store (`{%k}`, a vectorized tail) waits
    # the same way even when it lies inside it. Emerald Rapids: a chain that loads what it just stored takes 7.0 ns
    # per step when the store is masked (6 of 8 lanes), 2.9 unmasked or with all lanes set (`masked_forward.py`,
    # session 98); LLVM keeps a masked tail of accumulators in memory across a reduction loop
    failed_forward_masked: bool = False
    # Cycles a gather (`vgather*`) holds a load pipe per lane of its destination; 0: one load's. Emerald Rapids: 8
    # ymm gathers of a stride-2 input added 23 cycles to a 35-cycle body of 64 FMAs, 32 broadcasts and 8 loads
    # (`gather_body.py`, session 98); alone, a gather of 8 or 16 lanes takes a cycle per lane (`serial_gathers.py`)
    gather_lane_cycles: float = 0.0
    steady_state_copies: int = 4  # copies scheduled back to back to measure the steady state
    # Steady state as the cycles that `steady_state_copies` more copies add after that many, not those that copies
    # add after the first. A body that one long dependence chain makes latency-bound has slack that the first few
    # copies fill for free: two chains of 16 multiply-adds came out at 7.3 cycles per iteration, below the 16 that
    # the FMA pipes need for their 32 (`tests/test_costmodel_listsched.py`); 8 after 4 copies gives 16.0
    steady_state_slope: bool = False
    # Entries of the scheduler (reservation station) that holds dispatched instructions other than plain loads and
    # stores until they start; dispatch stalls while it is full. 0: unbounded (only the reorder window limits).
    # Long dependence chains fill it, so that iterations overlap less than the reorder window allows
    scheduler_entries: int = 0


class LatencyTable:
    """One micro-architecture profile of a table file, resolving instructions to `Timing`s."""

    def __init__(self, arch: str, profile: str, data: dict, source: str) -> None:
        self.arch, self.profile, self.source = arch, profile, source
        try:
            self.rob = int(data["rob"])
            self.store_forward = int(data["store_forward"])
            self.resources = {str(k): int(v) for k, v in data["resources"].items()}
            self._classes = {c: self._timing(data["classes"][c]) for c in CLASSES}
            self._folded = {int(w): self._timing(v) for w, v in data.get("folded_load", {}).items()}
            self._widths = {int(w): {c: self._timing(v) for c, v in per.items()}
                            for w, per in data.get("widths", {}).items()}
            self._mnemonics = [self._mnemonic_entry(e) for e in data.get("mnemonics", [])]
        except (KeyError, TypeError, ValueError, re.error) as e:
            raise TableError(f"{source}: profile {profile!r} is malformed: {e!r}") from e
        if 0 not in self._folded:
            raise TableError(f"{source}: profile {profile!r} needs a folded_load entry for width 0")
        self._cache: dict[tuple[str, str, int, bool], tuple[Timing, Timing | None]] = {}

    def _timing(self, entry: dict) -> Timing:
        res = str(entry["resource"])
        if res not in self.resources:
            raise TableError(f"unknown resource {res!r}")
        occupancy = max(1, round(float(entry["rthroughput"]) * self.resources[res]))
        return Timing(int(entry["latency"]), res, occupancy)

    def _mnemonic_entry(self, e: dict) -> tuple[re.Pattern, frozenset[str] | None, Timing | None, dict[int, Timing]]:
        default = self._timing(e) if "latency" in e else None
        per_width = {int(k): self._timing(v) for k, v in e.items() if k.isdigit()}
        classes = frozenset(e["classes"]) if "classes" in e else None
        return re.compile(e["pattern"]), classes, default, per_width

    def timing(self, inst: Instruction) -> tuple[Timing, Timing | None]:
        """(timing of the instruction, timing of its folded load micro-op or None)."""
        key = (inst.mnemonic, inst.iclass, inst.width, inst.mem_read)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        cls = inst.iclass
        if cls == BROADCAST and not inst.mem_read:
            cls = SHUFFLE  # register broadcast runs on a shuffle/ASIMD pipe, not a load port
        t = self._widths.get(inst.width, {}).get(cls) or self._classes[cls]
        for pattern, classes, default, per_width in self._mnemonics:
            if pattern.search(inst.mnemonic) and (classes is None or inst.iclass in classes):
                t = per_width.get(inst.width) or default or t
                break
        folded = None
        if inst.folded_load:
            folded = self._folded.get(inst.width) or self._folded[0]
        self._cache[key] = (t, folded)
        return t, folded


@lru_cache(maxsize=16)
def _read_table(arch: str) -> dict:
    if arch not in _TABLE_FILES:
        raise TableError(f"no latency table for architecture {arch!r}")
    path = TABLE_DIR / _TABLE_FILES[arch]
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TableError(f"cannot read {path}: {e}") from e
    if "_source" not in data or "profiles" not in data:
        raise TableError(f"{path}: needs '_source' and 'profiles'")
    return data


@lru_cache(maxsize=16)
def load_table(arch: str, profile: str | None = None) -> LatencyTable:
    """The latency table of `arch` ("x86" or "aarch64") for `profile` (default: the file's default)."""
    data = _read_table(arch)
    name = profile or data["default_profile"]
    if name not in data["profiles"]:
        raise TableError(f"{arch} table has no profile {name!r}; have {sorted(data['profiles'])}")
    return LatencyTable(arch, name, data["profiles"][name], str(TABLE_DIR / _TABLE_FILES[arch]))


def profile_for(spec: HardwareSpec, cpu: str | None = None) -> str:
    """Table profile of a target: by LLVM cpu name (`cpu`, `spec.extra['mcpu']`, or the `host-<cpu>`
    name of the host spec) when the table maps it, else the table's default."""
    data = _read_table(spec.arch)
    names = [cpu, str(spec.extra.get("mcpu", "")) if spec.extra else "", spec.name.removeprefix("host-")]
    for n in names:
        if n and n in data.get("cpu_profiles", {}):
            return data["cpu_profiles"][n]
    return data["default_profile"]


class ListScheduler:
    """Per-block cycle estimates for one table and machine, cached per block text."""

    def __init__(self, table: LatencyTable, spec: HardwareSpec, config: SchedConfig | None = None) -> None:
        self.table, self.spec = table, spec
        self.config = config or SchedConfig()
        self.issue_width = max(1, int(spec.issue_width))
        self.window = max(1, self.config.window or table.rob)
        self._cache: dict[tuple[tuple[str, ...], bool], float] = {}

    @classmethod
    def for_spec(cls, spec: HardwareSpec, config: SchedConfig | None = None, cpu: str | None = None
                 ) -> ListScheduler:
        """Scheduler with the table profile matching `spec` (see `profile_for`)."""
        return cls(load_table(spec.arch, profile_for(spec, cpu)), spec, config)

    def block_cycles(self, instructions: Sequence[Instruction], loop_body: bool = False) -> float:
        """Cycles for one execution of a basic block (steady-state per iteration for a whole loop body when
        the config asks for it)."""
        if not instructions:
            return 0.0
        steady = loop_body and self.config.steady_state
        key = (tuple(i.text for i in instructions), steady)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        cap = self.config.max_block_instructions
        insts = list(instructions[:cap])
        scale = len(instructions) / len(insts)
        if steady and self.config.steady_state_slope:
            n = max(1, self.config.steady_state_copies)
            fewer = self._schedule(insts * n)
            more = self._schedule(insts * (2 * n))
            cycles = max((more - fewer) / n, 1.0) * scale
        elif steady:
            n = max(2, self.config.steady_state_copies)
            one = self._schedule(insts)
            many = self._schedule(insts * n)
            cycles = max((many - one) / (n - 1), 1.0) * scale
        else:
            cycles = self._schedule(insts) * scale
        self._cache[key] = cycles
        return cycles

    def _schedule(self, insts: Sequence[Instruction]) -> float:
        """Greedy in-order dispatch, out-of-order start list schedule; returns the finish of the last one."""
        cfg = self.config
        table = self.table
        width, window = self.issue_width, self.window
        busy: dict[str, dict[int, int]] = {r: {} for r in table.resources}
        units = table.resources
        reg_ready: dict[str, int] = {}
        last_read: dict[str, int] = {}  # latest start of a reader since the last write (WAR)
        last_write: dict[str, int] = {}  # start of the last writer (WAW)
        store_ready: dict[object, int] = {}  # memory key -> when a stored value can be loaded
        load_start: dict[object, int] = {}  # memory key -> latest load start (store after load)
        # address form -> [(first byte, end, cycle)] of stores (when loadable) and of loads (their start)
        stores_at: dict[tuple, list[tuple[int, int, int]]] = {}
        loads_at: dict[tuple, list[tuple[int, int, int]]] = {}
        version: dict[str, int] = {}  # register -> writes so far, so that an address form names one address
        # with `failed_forward_cycles`: address forms that survive constant steps of their registers, and the stores
        # recorded in them: (first byte, end, index of the store, whether it is masked)
        steps: dict[str, int] = {}  # register -> sum of its constant steps
        stepped_version: dict[str, int] = {}  # register -> writes other than constant steps
        stepped_stores: dict[tuple, list[tuple[int, int, int, bool]]] = {}
        retire: list[int] = []
        waiting: list[int] = []  # starts of dispatched instructions held in the scheduler (a heap)
        dispatch_cycle, in_cycle = 0, 0
        end = 0

        def reserve(resource: str, earliest: int, occupancy: int) -> int:
            table_ = busy[resource]
            cap = units[resource]
            t = earliest
            while True:
                if all(table_.get(c, 0) < cap for c in range(t, t + occupancy)):
                    for c in range(t, t + occupancy):
                        table_[c] = table_.get(c, 0) + 1
                    return t
                t += 1

        for idx, inst in enumerate(insts):
            timing, folded = table.timing(inst)
            if cfg.gather_lane_cycles and X86_GATHER_RE.match(inst.mnemonic):
                held = max(1, round(max(inst.width // 32, 1) * cfg.gather_lane_cycles))
                timing = Timing(timing.latency, timing.resource, max(timing.occupancy, held))
            # in-order dispatch: issue width per cycle, and the window must have room
            if in_cycle >= width:
                dispatch_cycle, in_cycle = dispatch_cycle + 1, 0
            if idx >= window and retire[idx - window] > dispatch_cycle:
                dispatch_cycle, in_cycle = retire[idx - window], 0
            is_load = inst.iclass in (VEC_LOAD, SCALAR_LOAD, BROADCAST) and inst.mem_read
            held_in_scheduler = cfg.scheduler_entries > 0 and not (is_load or inst.iclass in (VEC_STORE, SCALAR_STORE))
            if held_in_scheduler:
                while waiting and waiting[0] <= dispatch_cycle:
                    heapq.heappop(waiting)
                if len(waiting) >= cfg.scheduler_entries:
                    dispatch_cycle, in_cycle = heapq.heappop(waiting), 0
            in_cycle += 1
            t = dispatch_cycle
            addr_regs: frozenset[str] = frozenset()
            base = inst.mem_base if cfg.memory_dependences else None
            span = None  # (address form, first byte, end) when accesses are told apart by address
            if base is not None and cfg.disambiguate_addresses and inst.mem_addr is not None:
                span = _address_span(inst, version)
                base = None
            if folded is not None:
                # the folded load needs only the address; the operation waits for its data
                addr_regs = inst.addr_reads
                ta = t
                for r in addr_regs:
                    ta = max(ta, reg_ready.get(r, 0))
                if base is not None:
                    ta = max(ta, store_ready.get(base, 0))
                if span is not None:
                    ta = max(ta, _overlapping(stores_at, span))
                ls = reserve(folded.resource, ta, folded.occupancy)
                if base is not None:
                    load_start[base] = max(load_start.get(base, 0), ls)
                if span is not None:
                    loads_at.setdefault(span[0], []).append((span[1], span[2], ls))
                t = max(t, ls + folded.latency)
            for r in inst.reads:
                if r not in addr_regs:
                    t = max(t, reg_ready.get(r, 0))
            if cfg.false_dependences:
                for r in inst.writes:
                    t = max(t, last_read.get(r, 0), last_write.get(r, 0))
            if base is not None:
                if is_load:
                    t = max(t, store_ready.get(base, 0))
                elif inst.mem_write:
                    t = max(t, load_start.get(base, 0))
            if span is not None:
                if is_load:
                    t = max(t, _overlapping(stores_at, span))
                elif inst.mem_write:
                    t = max(t, _overlapping(loads_at, span))
            stepped = None
            if cfg.failed_forward_cycles and inst.mem_addr is not None and (is_load or inst.mem_write):
                stepped = _address_span(inst, stepped_version, steps)
                if is_load:
                    form, lo, hi = stepped
                    for a, e, at, masked in stepped_stores.get(form, ()):
                        # overlaps the store but is not inside it, or overlaps a masked store
                        if a < hi and lo < e and (lo < a or hi > e or masked):
                            t = max(t, retire[at] + cfg.failed_forward_cycles)
            start = reserve(timing.resource, t, timing.occupancy)
            finish = start + timing.latency
            if held_in_scheduler and start > dispatch_cycle:
                heapq.heappush(waiting, start)
            for r in inst.reads:
                if last_read.get(r, -1) < start:
                    last_read[r] = start
            for r in inst.writes:
                reg_ready[r] = finish
                last_write[r] = start
                last_read.pop(r, None)
            if inst.writeback and inst.mem_base in inst.writes:
                reg_ready[inst.mem_base] = start + 1  # address update, not the loaded data
            if base is not None:
                if is_load:
                    load_start[base] = max(load_start.get(base, 0), start)
                if inst.mem_write:
                    store_ready[base] = max(store_ready.get(base, 0), start + table.store_forward)
            if span is not None:
                if is_load:
                    loads_at.setdefault(span[0], []).append((span[1], span[2], start))
                if inst.mem_write:
                    stores_at.setdefault(span[0], []).append((span[1], span[2], start + table.store_forward))
            for r in inst.writes:
                version[r] = version.get(r, 0) + 1
            if cfg.failed_forward_cycles:
                if stepped is not None and inst.mem_write:
                    masked = cfg.failed_forward_masked and _MASK_RE.search(inst.text) is not None
                    stepped_stores.setdefault(stepped[0], []).append((stepped[1], stepped[2], idx, masked))
                step = _constant_step(inst)
                for r in inst.writes:
                    if step is not None and r == step[0]:
                        steps[r] = steps.get(r, 0) + step[1]
                    else:
                        stepped_version[r] = stepped_version.get(r, 0) + 1
            end = max(end, finish)
            retire.append(max(finish, retire[-1]) if retire else finish)
        return float(end)

    def program_cycles(self, counts: InstructionCounts | Iterable[BlockExec]) -> float:
        """Sum over blocks of (cycles per execution x executions): Tuna's ILP cost of the program."""
        blocks = counts.blocks if isinstance(counts, InstructionCounts) else counts
        total = 0.0
        for be in blocks:
            if be.executions > 0 and be.block.instructions:
                total += self.block_cycles(be.block.instructions, be.loop_body) * be.executions
        return total


@dataclass
class BlockCycles:
    """Cycles of one block and its share of the program total (for reports)."""

    function: str
    label: str
    cycles: float
    executions: int
    total: float = field(init=False)

    def __post_init__(self) -> None:
        self.total = self.cycles * self.executions


def _address_span(inst: Instruction, version: dict[str, int], steps: dict[str, int] | None = None) -> tuple:
    """(address form, first byte, end) of a memory access: its base and index registers with their `version`s and
    its scale, then its bytes; with `steps`, the displacement moved by the registers' constant steps so far."""
    b, ix, sc, disp = inst.mem_addr
    if steps:
        disp += steps.get(b, 0) + (steps.get(ix, 0) * sc if ix else 0)
    return ((b, version.get(b, 0), ix, version.get(ix, 0) if ix else 0, sc),
            disp, disp + (inst.width // 8 if inst.width else 8))


_MASK_RE = re.compile(r"\{%k[1-7]\}")


def _constant_step(inst: Instruction) -> tuple[str, int] | None:
    """(register, k) of an x86 `add $k, %reg` or `sub $k, %reg` (a pointer or counter step), else None."""
    if inst.mnemonic not in ("addq", "subq", "addl", "subl") or len(inst.operands) != 2:
        return None
    imm, reg = inst.operands
    if not imm.startswith("$") or not reg.startswith("%"):
        return None
    try:
        k = int(imm[1:], 0)
    except ValueError:
        return None
    regs = [r for r in inst.writes if r != "flags"]
    return (regs[0], -k if inst.mnemonic.startswith("sub") else k) if len(regs) == 1 else None


def _overlapping(accesses: dict[tuple, list[tuple[int, int, int]]], span: tuple) -> int:
    """Latest cycle among the recorded accesses of `span`'s address form whose bytes overlap it (0 if none)."""
    form, lo, hi = span
    return max((c for a, b, c in accesses.get(form, ()) if a < hi and lo < b), default=0)


def block_report(scheduler: ListScheduler, counts: InstructionCounts, top: int = 10) -> list[BlockCycles]:
    """The `top` blocks by total cycles."""
    rows = [BlockCycles(be.function, be.block.label, scheduler.block_cycles(be.block.instructions, be.loop_body),
                        be.executions)
            for be in counts.blocks if be.executions > 0 and be.block.instructions]
    return sorted(rows, key=lambda r: -r.total)[:top]
