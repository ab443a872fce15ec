"""Tunable parameters of the search space, with their defaults in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# where an rfactor-ed block's final sum may also be computed (`SpaceConfig.rfactor_compute_location`)
SumPlacement = Literal["none", "elementwise", "all"]


@dataclass(frozen=True)
class SpaceConfig:
    """Knobs of sketch derivation and of the annotation domains (Ansor/MetaSchedule defaults)."""

    cpu_structure: str = "SSRSRS"
    gpu_structure: str = "SSSRRSRS"
    max_innermost_factor: int = 64
    cpu_fusion_levels: tuple[int, ...] = (1, 2)
    gpu_fusion_level: int = 3
    cpu_unroll_steps: tuple[int, ...] = (0, 16, 64, 512)
    gpu_unroll_steps: tuple[int, ...] = (0, 16, 64, 512, 1024)
    vector_caps: tuple[int, ...] = (8, 16, 32, 64)
    # CPU: a block whose vector lanes read an input a cache line or more apart (batch_matmul's B[b, j, k] or a
    # dense layer's W[j, k] vectorized along j, in the product or in the copy that packs it) loads each lane
    # alone. With 32-64 such lanes unrolled 64-512 steps LLVM took 5 s to over 2 minutes to build a candidate
    # (0.2 s at 16 lanes and 64 steps), and batch_matmul searches lost most of their time to 15 s timeouts.
    # Such a block gets at most this many lanes and its nest at most this many unrolled steps (None: no limit)
    cpu_gather_lanes: int | None = 16
    cpu_gather_unroll: int | None = 64
    cpu_gather_bytes: int = 64
    # CPU: a nest may also stay serial (parallel depth 0, the last option so that older records keep their meaning).
    # Entering a parallel region costs ~1.6 us on the 2-core VMs here (8 empty regions: 13 us), so a 7x7 global pool of
    # 2048 channels ran in 5.7 us serial against 8-12 us parallel (Zen 5, docs/measurements-costmodel.md, "Parallel
    # regions")
    cpu_serial_option: bool = True
    # rfactor when the reduction is long and the spatial extent leaves cores idle. 16 takes in a 7x7 global pool: its
    # rfactor sketches ran at 7.6 us against 17.4 us for the best plain one (Zen 4, docs/measurements-one-operator.md)
    rfactor_min_reduce: int = 16
    rfactor_space_per_core: int = 16
    # a reduction whose output has fewer elements than cores also gets a sketch that splits the reduction in three
    # and factors the outer and inner parts together: cores share it and each vectorizes (a 1024x1024 sum of
    # squares, norm2: 26.4 us against 45.3 us for the best one-core sample, Zen 4, docs/measurements-one-operator.md)
    rfactor_split: bool = True
    # rfactor sketches also in a variant whose final sum gets a compute-location hole in its consumer, as
    # MetaSchedule's space has (global_avg_pool: its sum computed in the mean's parallel loop, one nest fewer and
    # no nest that reads lines both cores wrote). "elementwise": only where the sum's one consumer reads it
    # elementwise (a pool's mean); "all": every rfactor-ed block; "none". Not "all": in two A/B draws on norm2,
    # softmax, layer_norm and global_avg_pool the picks moved -46% to +14% with no consistent sign, and softmax's
    # 16 sketches (9 without) thinned its search (docs/measurements-costmodel.md, "Lines that change cores")
    rfactor_compute_location: SumPlacement = "elementwise"
    # rfactor sketches of a sum that its consumer reads broadcast (softmax's row sums) also in a variant whose sum is
    # computed in the consumer's loops and its partial sums in the sum's, as MetaSchedule's RandomComputeLocation
    # places an rfactor block's producer: the producers of both can then share one parallel loop per batch (Zen 3,
    # 120 s: softmax's picks 1.02-1.05x faster than without, layer_norm's 0.93x in one draw;
    # docs/measurements-costmodel.md, "Session 72")
    rfactor_nest_partials: bool = True
    # GPU
    gpu_threads: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    cross_thread_threads: tuple[int, ...] = (32, 64, 128, 256, 512)
    cross_thread_min_reduce: int = 32
    fetch_vector: tuple[int, ...] = (1, 2, 4)
    max_vthread: int = 8
    min_threads_per_block: int = 32
    max_sketches: int = 16
    # CPU: a conditional block (padding) is not inlined but computed at a consumer loop, as MetaSchedule's
    # AutoInline(disallow_if_then_else) does; inlined padding guards every load of the convolution's inner loop
    # (ResNet-50 3x3 convolutions on Zen 3: best of 32 random candidates 2.1-2.4x faster without it)
    cpu_inline_conditional: bool = False
    # CPU: ... but inlining is one of the places its compute-location hole may choose (MetaSchedule's
    # SampleComputeLocation offers it too): with the whole output row unrolled, LLVM folds the guards of all but the
    # edge copies and packs them (depthwise_conv2d_s2 on Zen 5: MetaSchedule's inlined kernel ran 113 us, the best
    # we found with the padding at a loop 142 us)
    cpu_inline_conditional_hole: bool = True
    # CPU: a block that calls exp/log/tanh/... and has several consumers is not inlined (that would compute it once
    # per consumer, as softmax's exp in both the sum and the normalisation) but computed once, at the loop of the
    # consumer that the others feed (MetaSchedule's CPU AutoInline never inlines exp)
    cpu_inline_shared_math: bool = False
    # CPU: also derive sketches that pack a 2-D input of a matmul-like reduction into panels of P (a multiple of
    # the vector width) along the output's innermost axis, as BLAS packs B (GEMM 1024^3 on Zen 3: the best of
    # three random tilings 22.1 -> 13.4 ms packed with P = 16)
    cpu_pack_operands: bool = True
    pack_widths: tuple[int, ...] = (1, 2, 4)  # panel widths in vectors
    # CPU: when the other input of a packed matmul (A of a GEMM, whose rows the register tile broadcasts) has rows a
    # multiple of the L1 way size apart, all in one L1 set, the packed sketches get variants that pack it too, in panels
    # of this many rows, as BLAS packs A (GEMM 1024^3 on Zen 5: the search's pick ran 7.50 ms, 5.14 ms with A's rows
    # padded by 16 floats; benchmarks/gemm_set_conflicts.py). Empty: no such variants. Not offered for other shapes: the
    # extra sketches only thinned 60-s searches of gemm_bert, dense and batch_matmul (docs/measurements-one-operator.md)
    pack_row_widths: tuple[int, ...] = (4, 8, 16)
    # CPU: and, where those rows can be packed, sketches that first pad the rows (`pad_einsum`) to a multiple of these
    # widths, so that register tiles of 6 or 12 rows fit a power-of-two extent, with at most this fraction of extra
    # rows computed (GEMM 1024^3 padded to 1032 rows on the Granite Rapids-class guest: a hand-written 12 x 32 kernel
    # ran 74.7% of the FMA peak against 68.6% for the space's best power-of-two tile, the padded sketches' best 0.93x
    # that tile's time; docs/measurements-one-operator.md, session 55). Empty: no such sketches
    pack_row_pad_widths: tuple[int, ...] = (6, 12)
    pack_row_pad_waste: float = 0.02
    # CPU: and only the sketches that pack those rows are searched: the static model cannot price the set conflicts
    # that make the others slow (docs/measurements-one-operator.md, "Why the GEMM pick runs at half the peak")
    cpu_pack_critical_rows: bool = True
    # CPU: a network's constant weight that some sketch packs is packed by every searched sketch: the packing is done
    # once at build time (drytune.prepack), and the static model mispredicts some unpacked tiles badly
    # (BERT-base 128x768x3072: an unpacked pick predicted 1.61 ms ran 6.4 ms, its weight in cache or not;
    # the three best-predicted packed records of its dense layers ran 0.55-0.68 ms against unpacked picks' 0.74-0.86
    # (128x768x768) and 2.7-3.5 against 3.1 and 6.4 ms (128x768x3072); benchmarks/results/
    # weight_packing_bert_base_emeraldrapids_s52.md)
    cpu_pack_weights: bool = True
    # CPU: a network's constant weight with several reduction indices (a convolution's [ry, rx, rc, f]) is packable
    # too, into panels of the output channels with all reduction indices inside, in tasks whose constant weights are
    # at least `pack_conv_weight_min_share` of their arguments' bytes: the channels one core computes then come in as
    # one contiguous stream, not as a 64-256-byte piece of every 4-KiB row. ResNet-50's convolutions timed cold, as in
    # the network: drytune's picks 41.4 -> 35.0 ms (calls x time), MetaSchedule's kernels 39.6 -> 36.3 ms, the gains
    # in tasks of shares 0.37 and up (one 0.72 -> 0.44 ms), 0-7% below 0.25 (benchmarks/results/
    # conv_weight_panels_*_s60.md). MobileNet-V2, whose data is mostly activations, ran 1.08-1.10x slower with every
    # convolution weight above the L1 size packed (two seeds, benchmarks/results/network_ab_mobilenet_v2_*_s60.md;
    # its depthwise picks up to 3.3x slower with theirs packed), 0.965-1.020x with this share (the same A/B, *_share)
    cpu_pack_conv_weights: bool = True
    pack_conv_weight_min_share: float = 1 / 3

    def __post_init__(self) -> None:
        if self.rfactor_compute_location not in get_args(SumPlacement):
            raise ValueError(f"SpaceConfig.rfactor_compute_location must be one of {get_args(SumPlacement)}, "
                             f"not {self.rfactor_compute_location!r}")
