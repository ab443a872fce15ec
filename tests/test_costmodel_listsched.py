"""List scheduler: dependence chains, pipes, issue width, window, memory order, tables, real builds."""

import dataclasses
import json

import pytest
import tvm
from tvm import s_tir, te

from drytune.costmodel import asm, listsched
from drytune.costmodel.listsched import ListScheduler, SchedConfig, TableError, load_table
from drytune.target import resolve_target

SKX_SPEC = resolve_target("x86-avx512")[1]
N1_SPEC = resolve_target("aarch64")[1]


def x86(*lines: str) -> list[asm.Instruction]:
    return [asm.parse_instruction(line, "x86") for line in lines]


def skx(config: SchedConfig | None = None, **spec_changes) -> ListScheduler:
    spec = dataclasses.replace(SKX_SPEC, **spec_changes)
    return ListScheduler(load_table("x86", "skylake-x"), spec, config)


def _fma_entry() -> dict:
    data = json.loads((listsched.TABLE_DIR / "x86.json").read_text())
    return data["profiles"]["skylake-x"]["classes"]["vec_fma"]


def test_dependent_fmas_take_three_latencies():
    lat = _fma_entry()["latency"]
    chain = x86(*["vfmadd231ps\t%zmm1, %zmm2, %zmm0"] * 3)  # each reads the accumulator zmm0
    assert skx().block_cycles(chain) == 3 * lat


def test_independent_fmas_overlap_on_the_fma_pipes():
    entry = _fma_entry()
    independent = x86(*[f"vfmadd231ps\t%zmm1, %zmm2, %zmm{r}" for r in (3, 4, 5)])
    # the pool sustains one FMA per reciprocal throughput: the third starts 2 * rthroughput after the first
    assert skx().block_cycles(independent) == entry["latency"] + 2 * entry["rthroughput"]
    assert skx().block_cycles(independent) < skx().block_cycles(x86(*["vfmadd231ps\t%zmm1, %zmm2, %zmm0"] * 3))


def test_issue_width_and_pipes_bound_independent_alu_ops():
    adds = x86(*[f"addq\t$1, %r{n}" for n in range(8, 16)] + ["addq\t$1, %rax", "addq\t$1, %rbx",
                                                               "addq\t$1, %rcx", "addq\t$1, %rdx"])
    # 12 one-cycle ops on 4 ALU pipes: 3 cycles (the flags they all write only order their starts)
    assert skx().block_cycles(adds) == 3
    assert skx(issue_width=2).block_cycles(adds) == 6


def test_false_dependences_order_a_write_after_a_read_only_without_renaming():
    table = load_table("x86", "skylake-x")
    block = x86("vmovups\t(%rdi), %zmm8",
                "vaddps\t%zmm8, %zmm1, %zmm2",   # reads zmm1 once the load is done
                "vmulps\t%zmm5, %zmm5, %zmm1",   # overwrites zmm1: WAR with the add
                "vaddps\t%zmm1, %zmm1, %zmm3")
    load, add, mul = (table.timing(block[i])[0].latency for i in (0, 1, 2))
    renamed = skx(SchedConfig(false_dependences=False)).block_cycles(block)
    assert renamed == load + add
    assert skx().block_cycles(block) == renamed  # cores rename registers: the default
    assert skx(SchedConfig(false_dependences=True)).block_cycles(block) == load + mul + add


def test_reorder_window_of_one_serialises_everything():
    lat = _fma_entry()["latency"]
    independent = x86(*[f"vfmadd231ps\t%zmm1, %zmm2, %zmm{r}" for r in (3, 4, 5)])
    assert skx(SchedConfig(window=1)).block_cycles(independent) == 3 * lat


def test_loads_wait_for_stores_they_overlap():
    table = load_table("x86", "skylake-x")
    store = "vmovups\t%zmm0, (%rdi)"
    load_lat = table.timing(x86("vmovups\t64(%rsi), %zmm1")[0])[0].latency
    forwarded = table.store_forward + load_lat
    assert skx().block_cycles(x86(store, "vmovups\t32(%rdi), %zmm1")) == forwarded  # bytes 32..95 overlap
    assert skx().block_cycles(x86(store, "vmovups\t64(%rdi), %zmm1")) == load_lat  # the next 64 bytes
    assert skx().block_cycles(x86(store, "vmovups\t64(%rsi), %zmm1")) == load_lat
    assert skx().block_cycles(x86(store, "vmovups\t(%rdi,%rcx,4), %zmm1")) == load_lat  # another form: predicted apart
    # once the base register is written, the same text names another address
    assert skx().block_cycles(x86(store, "movq\t%rdx, %rdi", "vmovups\t(%rdi), %zmm1")) < forwarded + 1
    # without disambiguation (Tuna's rule), any access through the base register is ordered
    base_only = skx(SchedConfig(disambiguate_addresses=False))
    assert base_only.block_cycles(x86(store, "vmovups\t64(%rdi), %zmm1")) == forwarded
    assert skx(SchedConfig(memory_dependences=False)).block_cycles(x86(store, "vmovups\t(%rdi), %zmm1")) == load_lat


def test_accumulators_kept_in_memory_overlap_when_their_addresses_differ():
    """Two accumulator chains through memory (load, FMAs, store), as LLVM emits a register tile it does not keep in
    registers: the chains are independent, so they take about as long as one."""
    def chain(disp: int) -> list[str]:
        return [f"vmovups\t{disp}(%rax,%rbp,4), %zmm9", *["vfmadd231ps\t%zmm1, %zmm2, %zmm9"] * 4,
                f"vmovups\t%zmm9, {disp}(%rax,%rbp,4)"]

    one = skx().block_cycles(x86(*chain(0)))
    two = skx().block_cycles(x86(*chain(0), *[i.replace("%rbp", "%r8") for i in chain(0)]))
    assert two < 1.5 * one
    assert skx(SchedConfig(disambiguate_addresses=False)).block_cycles(
        x86(*chain(0), *[i.replace("%rbp", "%r8") for i in chain(0)])) >= 2 * one


def test_folded_load_adds_its_latency_to_the_operation():
    table = load_table("x86", "skylake-x")
    folded = x86("vfmadd231ps\t(%rax){1to16}, %zmm1, %zmm0")
    t, load = table.timing(folded[0])
    assert load is not None and skx().block_cycles(folded) == load.latency + t.latency


def test_register_broadcast_uses_shuffle_timing_and_cache_and_cap():
    table = load_table("x86", "skylake-x")
    bc = x86("vbroadcastss\t%xmm0, %zmm1")[0]
    assert table.timing(bc)[0].resource == "shuffle"
    sched = skx(SchedConfig(max_block_instructions=8))
    long_block = x86(*[f"addq\t$1, %r{8 + n % 8}" for n in range(64)])
    capped = sched.block_cycles(long_block)
    assert capped == sched.block_cycles(long_block[:8]) * 8  # scaled by length
    assert sched.block_cycles(long_block) == capped  # cached


def test_tables_have_sources_and_every_class():
    for arch in ("x86", "aarch64"):
        data = json.loads((listsched.TABLE_DIR / f"{arch}.json").read_text())
        assert data["_source"]
        for name, prof in data["profiles"].items():
            assert prof["_source"]
            assert set(prof["classes"]) == set(asm.CLASSES)
            load_table(arch, name)
    assert listsched.profile_for(N1_SPEC) == "neoverse-n1"
    assert listsched.profile_for(SKX_SPEC) == "skylake-x"
    assert listsched.profile_for(SKX_SPEC, cpu="znver4") == "zen4"
    with pytest.raises(TableError):
        load_table("riscv")
    with pytest.raises(TableError):
        load_table("x86", "pentium")


M = N = K = 64


def _matmul_asm_counts():
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, kk, i1, j1)
    sch.vectorize(j1)
    sch.unroll(i1)
    sch.decompose_reduction(sch.get_sblock("C"), kk)
    target, _ = resolve_target("aarch64")
    text = tvm.compile(sch.mod, target=target).mod.inspect_source("asm")
    prog = asm.parse_asm(text, "aarch64")
    return asm.count_instructions(prog, asm.map_loops(prog, []))


def test_program_cycles_of_an_aarch64_build():
    counts = _matmul_asm_counts()
    sched = ListScheduler.for_spec(N1_SPEC)
    assert sched.table.profile == "neoverse-n1"
    total = sched.program_cycles(counts)
    by_hand = sum(sched.block_cycles(b.block.instructions) * b.executions for b in counts.blocks
                  if b.executions)
    assert total == pytest.approx(by_hand)
    # no faster than the FMA pipes allow
    fma = sched.table.timing(asm.parse_instruction("fmla\tv0.4s, v1.4s, v2.4s", "aarch64"))[0]
    assert total >= counts.get(asm.VEC_FMA) * fma.occupancy / sched.table.resources[fma.resource]
    steady = ListScheduler.for_spec(N1_SPEC, SchedConfig(steady_state=True)).program_cycles(counts)
    assert 0 < steady <= total


def _masked_rows_body(row_step: int) -> list[asm.Instruction]:
    """One loop iteration over a row of 14 accumulators stored as 8 lanes plus a masked 6 of a ymm (32 bytes from
    byte 32): an 8-step multiply-add chain on each part, then the pointer steps to the next row `row_step` bytes on."""
    chain = ["vfmadd231ps\t%ymm1, %ymm2, %ymm{r}"] * 8
    return x86("vmovups\t(%rax,%r9), %ymm8", *[c.format(r=8) for c in chain], "vmovups\t%ymm8, (%rax,%r9)",
               "vmovups\t32(%rax,%r9), %ymm9 {%k1} {z}", *[c.format(r=9) for c in chain],
               "vmovups\t%ymm9, 32(%rax,%r9) {%k1}", f"addq\t${row_step}, %r9", "cmpq\t$4096, %r9",
               "jne\t.LBB0_1")


def test_a_load_reaching_into_the_previous_rows_masked_store_waits_for_it_to_retire():
    """Rows of 14 floats (56 bytes apart): the masked tail's store (bytes 32-64) covers the next row's first 8 bytes,
    so the next iteration's first load overlaps it without lying inside it and cannot be forwarded; with
    `failed_forward_cycles` it waits for that store's retirement, and the iterations run one after another. Rows
    padded to 64 bytes do not overlap and keep their steady state (conv2d_s2's row on Emerald Rapids: 10.0 ms, padded
    2.32)."""
    fma = _fma_entry()["latency"]
    on = skx(SchedConfig(steady_state=True, failed_forward_cycles=20))
    off = skx(SchedConfig(steady_state=True))
    overlapping, padded = _masked_rows_body(56), _masked_rows_body(64)
    assert off.block_cycles(overlapping, loop_body=True) < 2 * 8 * fma  # chains of successive rows overlap
    # each row waits for the previous one's masked store to retire (its chain) and then 20 cycles
    assert on.block_cycles(overlapping, loop_body=True) >= 8 * fma + 20
    assert on.block_cycles(padded, loop_body=True) == off.block_cycles(padded, loop_body=True)
    assert on.block_cycles(padded, loop_body=True) < 8 * fma


def _tail_in_memory_body(mask: str) -> list[asm.Instruction]:
    """One iteration of a reduction loop whose 8 lanes of accumulators stay in a register and whose tail lanes LLVM
    keeps in memory: loaded under `mask` at the same address in every iteration, two multiply-adds, stored back."""
    return x86("vbroadcastss\t(%rsi,%r13), %ymm1", "vfmadd231ps\t%ymm1, %ymm2, %ymm0",
               f"vmovups\t32(%r11), %ymm9 {mask} {{z}}", "vfmadd231ps\t%ymm1, %ymm2, %ymm9",
               "vfmadd231ps\t%ymm1, %ymm3, %ymm9", f"vmovups\t%ymm9, 32(%r11) {mask}", "addq\t$4, %r13",
               "cmpq\t$64, %r13", "jne\t.LBB0_1")


def test_a_load_of_a_masked_stores_own_bytes_waits_for_it_to_retire_with_failed_forward_masked():
    """The next iteration's masked load reads exactly what the masked store wrote, so `failed_forward_cycles` alone
    (a load reaching past the store) leaves it forwarded; with `failed_forward_masked` it waits for the store's
    retirement, and each iteration costs the chain's latency plus those cycles."""
    fma = _fma_entry()["latency"]
    body = _tail_in_memory_body("{%k1}")
    off = skx(SchedConfig(steady_state=True))
    partial_only = skx(SchedConfig(steady_state=True, failed_forward_cycles=20))
    masked = skx(SchedConfig(steady_state=True, failed_forward_cycles=20, failed_forward_masked=True))
    assert partial_only.block_cycles(body, loop_body=True) == off.block_cycles(body, loop_body=True)
    assert masked.block_cycles(body, loop_body=True) >= 2 * fma + 20
    assert off.block_cycles(body, loop_body=True) < 2 * fma + 20
    # an unmasked store of the same bytes is forwarded under either setting
    plain = x86(*(i.text.replace(" {%k1}", "").replace(" {z}", "") for i in body))
    assert masked.block_cycles(plain, loop_body=True) == off.block_cycles(plain, loop_body=True)


def test_a_gather_holds_a_load_pipe_per_lane_with_gather_lane_cycles():
    """Eight ymm gathers beside sixteen multiply-adds: priced as one load each they hide behind the FMAs; holding a
    load pipe a cycle per lane (8 x 8 lanes over the profile's load pipes) they bound the body instead."""
    gathers = [f"vgatherdps\t{64 * g}(%r10,%ymm28), %ymm{g} {{%k1}}" for g in range(8)]
    fmas = [f"vfmadd231ps\t%ymm{g}, %ymm20, %ymm{8 + g}" for g in range(8)] * 2
    body = x86(*gathers, *fmas, "addq\t$4, %r10", "cmpq\t$64, %r10", "jne\t.LBB0_1")
    off = skx(SchedConfig(steady_state=True))
    per_lane = skx(SchedConfig(steady_state=True, gather_lane_cycles=1.0))
    pipes = per_lane.table.resources["load"]
    assert off.block_cycles(body, loop_body=True) < 8 * 8 / pipes
    assert per_lane.block_cycles(body, loop_body=True) >= 8 * 8 / pipes


def _accumulator_body(chains: int) -> list[asm.Instruction]:
    """A loop body of 32 multiply-adds into `chains` accumulators loaded from and stored back to rows that the
    pointer step moves past: iterations are independent, each accumulator a chain of 32 / chains."""
    loads = [f"vmovups\t{64 * c}(%rsi), %ymm{c}" for c in range(chains)]
    fmas = [f"vfmadd231ps\t%ymm{16 + k % 8}, %ymm30, %ymm{c}" for k in range(32 // chains) for c in range(chains)]
    stores = [f"vmovups\t%ymm{c}, {64 * c}(%rsi)" for c in range(chains)]
    return x86(*loads, *fmas, *stores, "addq\t$1024, %rsi", "cmpq\t%rsi, %rdi", "jne\t.LBB0_1")



def test_steady_state_slope_keeps_long_chains_at_the_pipes_rate():
    """Measured after the first copy, two chains of 16 overlap the copies' chains for free and come out below the
    16 cycles that two FMA pipes need for 32 multiply-adds; measured after four copies they take the pipes' rate."""
    fmas = 32 * _fma_entry()["rthroughput"]
    first = skx(SchedConfig(steady_state=True))
    slope = skx(SchedConfig(steady_state=True, steady_state_slope=True))
    assert first.block_cycles(_accumulator_body(2), loop_body=True) < fmas
    for chains in (2, 8):
        assert slope.block_cycles(_accumulator_body(chains), loop_body=True) == pytest.approx(fmas)
    # one chain of 32 is longer than the reorder window can overlap: slower than the pipes
    assert slope.block_cycles(_accumulator_body(1), loop_body=True) > 1.5 * fmas


def test_long_multiply_add_chains_fill_a_bounded_scheduler():
    """With a scheduler of 24 entries the waiting multiply-adds of two chains of 16 fill it and stall dispatch;
    eight chains of 4 still run at the pipes' rate."""
    fmas = 32 * _fma_entry()["rthroughput"]
    bounded = skx(SchedConfig(steady_state=True, steady_state_slope=True, scheduler_entries=24))
    assert bounded.block_cycles(_accumulator_body(8), loop_body=True) == pytest.approx(fmas)
    assert bounded.block_cycles(_accumulator_body(2), loop_body=True) >= 1.5 * fmas
