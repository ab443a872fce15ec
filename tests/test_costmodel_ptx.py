"""GPU static features from real nvcc/ptxas output (no GPU needed): builds, loops, counts, occupancy, banks."""

import shutil

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

import drytune as dt
from drytune import workloads
from drytune.costmodel import cuda_build as cb
from drytune.costmodel import gpu_features as gf
from drytune.costmodel import ptx
from drytune.target import resolve_target

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ptxas") is None,
                                reason="needs the CUDA toolkit (nvcc, ptxas)")

M = N = K = 256
BM, BN, BK, TM, TN = 64, 64, 16, 4, 4


def _matmul():
    return te.create_prim_func(workloads.gemm(M, N, K))


def _gpu_matmul(scope: str = "shared") -> tvm.IRModule:
    """Block tile BMxBN, thread tile TMxTN, shared-memory tiles of A and B per BK step, local accumulator."""
    sch = s_tir.Schedule(_matmul())
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    bi, ti, ii = sch.split(i, [None, BM // TM, TM])
    bj, tj, jj = sch.split(j, [None, BN // TN, TN])
    ko, ki = sch.split(k, [None, BK])
    sch.reorder(bi, bj, ti, tj, ko, ki, ii, jj)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    CL = sch.cache_write(C, 0, "local")
    sch.reverse_compute_at(CL, tj)
    for operand in (0, 1):
        S = sch.cache_read(C, operand, scope)
        sch.compute_at(S, ko)
        fused = sch.fuse(*sch.get_loops(S)[-2:])
        _, ty, tx = sch.split(fused, [None, BM // TM, BN // TN])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    sch.decompose_reduction(C, ko)
    return sch.mod


@pytest.fixture(scope="module")
def build() -> cb.CudaBuild:
    return cb.build_cuda(_gpu_matmul(), "cuda-sm90")


@pytest.fixture(scope="module")
def kernel(build):
    module = ptx.parse_ptx(build.ptx)
    return module, module.kernels["main_kernel"]


def test_launch_configuration_from_thread_bindings(build):
    (launch,) = build.launch
    assert launch.kernel == "main_kernel"
    assert launch.grid == (N // BN, M // BM, 1)
    assert launch.block == (BN // TN, BM // TM, 1)
    assert launch.threads == M * N // (TM * TN)


def test_launch_configs_of_two_kernels_with_vthreads():
    A = te.placeholder((1024,), "float32", name="A")
    B = te.compute((1024,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((1024,), lambda i: B[i] + 1.0, name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, C]))
    for name in ("B", "C"):
        (i,) = sch.get_loops(sch.get_sblock(name))
        bx, vt, tx = sch.split(i, [None, 2, 64])
        sch.bind(bx, "blockIdx.x")
        sch.bind(vt, "vthread.x")
        sch.bind(tx, "threadIdx.x")
    configs = cb.launch_configs(sch.mod)
    assert [c.kernel for c in configs] == ["main_kernel", "main_kernel_1"]
    assert all(c.grid == (8, 1, 1) and c.block == (64, 1, 1) and c.vthreads == 2 for c in configs)


def _two_elementwise_kernels():
    A = te.placeholder((1024,), "float32", name="A")
    B = te.compute((1024,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((1024,), lambda i: B[i] + A[i], name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, C]))
    for name in ("B", "C"):
        (i,) = sch.get_loops(sch.get_sblock(name))
        bx, tx = sch.split(i, [None, 128])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
    return sch.mod


def test_kernel_arguments_and_workspace_describe_every_launch():
    """Two kernels through a global intermediate: each parameter names a function buffer or a workspace."""
    built = cb.build_cuda(_two_elementwise_kernels(), "cuda-sm90")
    assert built.workspace == {"B": 1024 * 4}
    assert set(built.kernel_args) == {"main_kernel", "main_kernel_1"}
    assert set(built.kernel_args["main_kernel"]) == {"A", "B"}
    assert set(built.kernel_args["main_kernel_1"]) == {"A", "B", "C"}
    # the order is the PTX entry's: as many parameters as the kernel declares
    module = ptx.parse_ptx(built.ptx)
    for name, args in built.kernel_args.items():
        assert built.ptx.count(f".param .u64 {name}_param_") == len(args)
        assert name in module.kernels


def test_ptxas_resources_match_shared_tiles(build):
    res = build.resources["main_kernel"]
    assert res.smem_bytes == (BM * BK + BK * BN) * 4
    assert 0 < res.registers <= 255
    assert res.spill_bytes == 0
    assert res.barriers == 1


def test_k_loop_trip_count_recovered(kernel):
    _, func = kernel
    loops = ptx.find_loops(func)
    outer = [lp for lp in loops if lp.depth == 0]
    assert len(outer) == 1
    assert outer[0].trip_count == K // BK
    assert outer[0].step == 1 and outer[0].init == 0
    assert all(lp.trip_count is not None for lp in loops)


def test_dynamic_counts_per_thread(kernel):
    module, func = kernel
    prof = ptx.dynamic_profile(func, module)
    assert prof.counts["fp32.fma"] == K * TM * TN
    assert prof.unknown_loops == 0
    # each thread copies (BM*BK + BK*BN) / threads floats of A and B per k step, and writes TMxTN outputs
    threads = (BM // TM) * (BN // TN)
    assert prof.bytes["ld.global"] == (K // BK) * (BM * BK + BK * BN) // threads * 4
    assert prof.bytes["st.global"] == TM * TN * 4
    assert prof.counts["bar"] == 2 * (K // BK)


def test_trip_counts_of_handwritten_loops():
    source = """
    extern "C" __global__ void loops(float* a, int n) {
      float s = 0.f;
      #pragma unroll 1
      for (int i = 3; i < 1000; i += 7) s = s * a[i] + 1.f;
      #pragma unroll 1
      for (int j = 200; j > 0; j -= 3) s = s * a[j] + 2.f;
      #pragma unroll 1
      for (int i = 0; i < 10; ++i) {
        #pragma unroll 1
        for (int k = 0; k < 12; ++k) s = s * a[i * 12 + k] + 1.f;
      }
      float t = 0.f;
      for (int i = 0; i < n; ++i) t += a[i];
      a[threadIdx.x] = s + t;
    }
    """
    module = ptx.parse_ptx(cb.compile_ptx(source, "sm_90"))
    func = module.kernels["loops"]
    trips = sorted(lp.trip_count for lp in ptx.find_loops(func) if lp.trip_count is not None)
    assert trips == sorted([143, 67, 10, 12])  # ceil(997/7); 200..2 step -3; nested 10 x 12
    prof = ptx.dynamic_profile(func, module)
    assert prof.counts["fp32.fma"] == 143 + 67 + 10 * 12
    assert prof.unknown_loops >= 1  # the loop bounded by `n` falls back to one iteration, and is counted


_HAND_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry hand(.param .u64 p)
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  .reg .f32 %f<2>;
  mov.u32 %r1, 0;
  mov.f32 %f1, 0f3F800000;
$L_head:                       // top-tested: for (r1 = 0; r1 < 40; r1 += 4)
  setp.ge.s32 %p1, %r1, 40;
  @%p1 bra $L_exit;
  fma.rn.f32 %f1, %f1, %f1, %f1;
  add.s32 %r1, %r1, 4;
  bra.uni $L_head;
$L_exit:
  mov.u32 %r2, 100;
$L_down:                       // bottom-tested, negated guard: do { r2 -= 10 } while (r2 != 0)
  fma.rn.f32 %f1, %f1, %f1, %f1;
  add.s32 %r2, %r2, -10;
  setp.eq.s32 %p2, %r2, 0;
  @!%p2 bra $L_down;
  ret;
}
"""


def test_top_tested_and_negated_loops_in_handwritten_ptx():
    module = ptx.parse_ptx(_HAND_PTX)
    loops = ptx.find_loops(module.kernels["hand"])
    assert [lp.trip_count for lp in loops] == [10, 10]
    assert ptx.dynamic_profile(module.kernels["hand"]).counts["fp32.fma"] == 20


_SETTLED_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry settled(.param .u64 p)
{
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .f32 %f<2>;
  mov.f32 %f1, 0f3F800000;
  mov.u32 %r5, 0;
$L_outer:                      // 5 trips; inside, LLVM's two-trip form: the counter's next value is the constant 1
  mov.u32 %r1, 0;
$L_two:
  fma.rn.f32 %f1, %f1, %f1, %f1;
  add.s32 %r2, %r1, 1;
  mov.u32 %r3, 1;
  setp.lt.u32 %p1, %r2, 2;
  mov.u32 %r1, %r3;
  @%p1 bra $L_two;
  mov.u32 %r6, 7;
$L_once:                       // the same form whose test fails in iteration 1: one trip
  fma.rn.f32 %f1, %f1, %f1, %f1;
  add.s32 %r7, %r6, 1;
  mov.u32 %r6, 0;
  setp.lt.u32 %p2, %r7, 2;
  @%p2 bra $L_once;
  add.s32 %r5, %r5, 1;
  setp.lt.u32 %p2, %r5, 5;
  @%p2 bra $L_outer;
  ret;
}
"""


def test_loop_whose_counter_is_reset_to_a_constant_at_its_back_edge():
    func = ptx.parse_ptx(_SETTLED_PTX).kernels["settled"]
    loops = ptx.find_loops(func)
    assert [lp.trip_count for lp in loops] == [5, 2, 1]
    prof = ptx.dynamic_profile(func)
    assert prof.unknown_loops == 0
    assert prof.counts["fp32.fma"] == 5 * (2 + 1)


def test_occupancy_hand_computed():
    _, spec = resolve_target("cuda-sm90")
    # 64 regs x 32 = 2048 regs per warp -> 32 warps by registers -> 4 blocks of 8 warps
    occ = gf.occupancy(64, 8192, 256, spec)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limiter) == (4, 32, 0.5, "registers")
    # 72 regs -> 2304 per warp -> 28 warps -> 3 blocks of 8 warps
    assert gf.occupancy(72, 0, 256, spec).blocks_per_sm == 3
    # 48 KB + 1 KB reserved per block in 228 KB -> 4 blocks of 4 warps
    occ = gf.occupancy(32, 48 * 1024, 128, spec)
    assert (occ.blocks_per_sm, occ.occupancy, occ.limiter) == (4, 0.25, "shared_memory")
    assert gf.occupancy(32, 0, 2048, spec).limiter == "invalid"
    assert gf.waves(16 * 132, 4, 132) == 4.0


def _shared_copy(stride_32: bool, vector: bool = False) -> tvm.IRModule:
    """Threads copy A into shared memory cooperatively, then thread t reads row t (stride 32) or column t."""
    rows, cols = (4, 128) if vector else (32, 32)
    A = te.placeholder((rows, cols), "float32", name="A")
    B = te.compute((rows, cols), lambda i, j: A[i, j] * 2.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    blk = sch.get_sblock("B")
    i, j = sch.get_loops(blk)
    if vector:
        jo, ji = sch.split(j, [None, 4])
        sch.reorder(jo, i, ji)
        tx = jo
    elif stride_32:
        tx = i
    else:
        sch.reorder(j, i)
        tx = j
    sch.bind(tx, "threadIdx.x")
    shared = sch.cache_read(blk, 0, "shared")
    sch.compute_at(shared, tx)
    fused = sch.fuse(*sch.get_loops(shared)[1:])
    _, t = sch.split(fused, [None, 32])
    sch.bind(t, "threadIdx.x")
    if vector:
        sch.vectorize(sch.get_loops(blk)[-1])
    return sch.mod


def _shared_loads(mod):
    (conflicts,) = gf.module_bank_conflicts(mod, "cuda-sm90").values()
    return conflicts, [a for a in conflicts.accesses if not a.is_store]


def test_bank_conflicts_stride_32_vs_stride_1():
    conflicts, (load,) = _shared_loads(_shared_copy(stride_32=True))
    assert load.degree == 32 and load.wavefronts == 32
    assert conflicts.max_degree == 32
    conflicts, (load,) = _shared_loads(_shared_copy(stride_32=False))
    assert load.degree == 1 and conflicts.conflict_free and conflicts.transaction_ratio == 1.0
    # float4 per thread, consecutive threads: four 128-byte phases, none conflicting
    _, (load,) = _shared_loads(_shared_copy(stride_32=False, vector=True))
    assert (load.degree, load.wavefronts, load.ideal_wavefronts) == (1, 4, 4)


def test_gpu_features_of_matmul(build):
    _, spec = resolve_target("cuda-sm90")
    (feat,) = gf.features_from_build(build, spec)
    res = build.resources["main_kernel"]
    occ = gf.occupancy(res.registers, res.smem_bytes, feat.threads_per_block, spec)
    assert feat.blocks_per_sm == occ.blocks_per_sm and feat.blocks == 16
    assert feat.fma == K * TM * TN and feat.flops == 2 * K * TM * TN
    # A_shared[ty*64 + i*16 + k]: threads 0..15 (ty=0) broadcast word 0, 16..31 (ty=1) word 64: 2 words in bank 0
    assert feat.bank_conflict_degree == 2
    assert feat.work_cycles > feat.issue_cycles > 0
    assert feat.exposed_load_cycles > 0 and feat.unknown_loops == 0


def test_tensor_core_loop_counts_mma_work():
    source = r"""
    #include <mma.h>
    using namespace nvcuda;
    extern "C" __global__ void tc(const half* a, const half* b, float* c) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
      wmma::fill_fragment(fc, 0.0f);
      #pragma unroll 1
      for (int k = 0; k < 256; k += 16) {
        wmma::load_matrix_sync(fa, a + k, 256);
        wmma::load_matrix_sync(fb, b + k, 256);
        wmma::mma_sync(fc, fa, fb, fc);
      }
      wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
    }
    """
    module = ptx.parse_ptx(cb.compile_ptx(source, "sm_90"))
    prof = ptx.dynamic_profile(module.kernels["tc"], module)
    assert prof.counts["mma"] == 256 // 16
    assert prof.mma_fma == 16 * (16 * 16 * 16) / 32  # 16 steps of a 16x16x16 tile shared by 32 threads
    assert prof.bytes["ld.global"] == 16 * 2 * (16 * 16 * 2) / 32  # two half 16x16 tiles per step
    assert prof.bytes["st.global"] == 16 * 16 * 4 / 32


def test_dynamic_shared_memory_is_added_to_ptxas_smem():
    build = cb.build_cuda(_gpu_matmul(scope="shared.dyn"), "cuda-sm90")
    _, spec = resolve_target("cuda-sm90")
    (feat,) = gf.features_from_build(build, spec)
    assert build.dynamic_smem["main_kernel"] == (BM * BK + BK * BN) * 4
    assert feat.smem_bytes == build.resources["main_kernel"].smem_bytes + (BM * BK + BK * BN) * 4


def test_broken_source_raises_build_error():
    with pytest.raises(cb.CudaBuildError) as err:
        cb.compile_ptx('extern "C" __global__ void k(float* a) { a[0] = undefined_name; }', "sm_90")
    assert err.value.stage == "nvcc" and "undefined_name" in err.value.log
    A = te.placeholder((32,), "float32", name="A")
    B = te.compute((32,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(cb.CudaBuildError):  # nothing bound to threads: no CUDA kernel
        cb.build_cuda(tvm.IRModule({"main": te.create_prim_func([A, B])}), "cuda-sm90")


def test_ptx_cache_and_parse_errors():
    source = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] += 1.f; }'
    first = cb.compile_ptx(source, "sm_90")
    hits = cb.cache_stats()["hits"]
    assert cb.compile_ptx(source, "sm_90") == first
    assert cb.cache_stats()["hits"] == hits + 1
    with pytest.raises(ptx.PtxParseError):
        ptx.parse_ptx("not ptx at all")


@pytest.mark.parametrize("opcode,operands,cls", [
    ("fma.rn.f32", (), "fp32.fma"), ("fma.rn.f16x2", (), "fp16.fma"), ("mad.lo.s32", (), "int.mul"),
    ("ld.global.nc.v4.f32", (), "ld.global"), ("ld.shared::cta.f32", (), "ld.shared"),
    ("st.local.f32", (), "st.local"), ("bar.sync", (), "bar"), ("cvt.rn.f32.s32", (), "cvt"),
    ("mov.u32", ("%r1", "%tid.x"), "special"), ("setp.lt.s32", (), "setp"), ("div.rn.f32", (), "fp32.div"),
    ("ex2.approx.f32", (), "sfu"), ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", (), "mma"),
])
def test_instruction_classes(opcode, operands, cls):
    assert ptx.classify(opcode, operands) == cls


def test_tir_prescore_counts_each_threads_work():
    from drytune.costmodel.gpu_prescore import kernel_work, prescore_terms

    first, second = kernel_work(_two_elementwise_kernels(), "cuda-sm90")
    # B[i] = A[i] * 2: one global load and one global store per thread, the multiply, and the index
    # blockIdx.x * 128 + threadIdx.x (an add and a multiply); C[i] = B[i] + A[i]: two loads, the add, the index
    assert (first.blocks, first.threads_per_block) == (8, 128) == (second.blocks, second.threads_per_block)
    assert (first.global_accesses, first.arith) == (2, 3)
    assert (second.global_accesses, second.arith) == (3, 3)
    assert first.shared_accesses == first.local_accesses == 0
    _, spec = resolve_target("cuda-sm90")
    terms = prescore_terms([first, second], spec)
    assert terms[3] == 2.0  # two launches
    assert terms[0] == (5 + 6) * 4 * 1 / 4  # operations x warps x blocks on the busiest SM / 4 schedulers


def test_cuda_prescore_uses_tir_terms_when_the_calibration_weighs_them():
    from drytune.costmodel.model import Coefficients, StaticCostModel

    task = workloads.small("gemm").task("cuda-sm90")
    cands = dt.SearchSpace(task).sample(4, seed=3)
    model = StaticCostModel("cuda-sm90")
    assert "prescore" in model.coefficients.extra and StaticCostModel.prescore_is_cheap("cuda-sm90")
    pre = model.prescore(task, cands)
    assert np.all(np.isfinite(pre)) and np.all(pre > 0)
    assert not np.allclose(pre, model.predict(task, cands))  # not the full score
    # a calibration without pre-score weights: the pre-score is the full score
    without = StaticCostModel("cuda-sm90", coefficients=Coefficients("nvidia", model.coefficients.values, "test"))
    assert np.allclose(without.prescore(task, cands), without.predict(task, cands))
