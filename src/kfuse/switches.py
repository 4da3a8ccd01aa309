"""The switches between two code paths that kfuse keeps for A/B measurements, in one place.

Each is read where its choice is made, at the time it is made (`switches.NAME`, never a
copy), so that a test or an A/B run sets it on this module: `monkeypatch.setattr(switches,
"SPLIT_RAGGED_ROWS", True)`, or `tools/kernel_times.py ... --ab
kfuse.switches.SPLIT_RAGGED_ROWS=True`. The ones that are on were measured and kept (their
other path stays for the A/B and for the tests that check both give the same results), but
for those that say why they are on before their measurement; the ones that are off wait for a
measurement (tools/tuning_plan.txt lists the commands), or were measured slower and say so.
"""

# ---- measured and on -------------------------------------------------------------------

CAT_PART_PER_VECTOR = True
"""A pointwise kernel that computes one cat whose part windows are whole vectors picks a
vector's part once and runs its lanes with that part alone (codegen.windowed.
vector_part_selector), where it selected per lane. Measured as a hand edit of the same form on
an H100 (bf16, us, per lane -> per vector, torch.compile): rope_partial [8, 32, 4096, 128]
481.3 -> 374.4 (190.1)."""

PART_LOCAL_LOADS = True
"""A kernel that picks each vector's cat part once (CAT_PART_PER_VECTOR) loads only that
part's windowed reads, into register slots the parts share (codegen.windowed.PartSlots),
where it loaded every part's reads, predicated, and held them all. Measured on an H100
(rope_partial [8, 32, 4096, 128] bf16, whole calls, us; all reads -> slots, torch.compile):
373.6 -> 291.7 (189.4), 107 -> 78 registers a thread."""

OUTLINE_HEAVY_MATH = True
"""A kernel function with three or more calls of sin, cos, tan, lgamma or sincos calls them
out of line (kfuse.codegen.outlined_math). Measured for compile time: nvFuser's
many-pointwise-ops host benchmark at 8 iterations compiled in 13.2 s inlined, 0.6 s outlined
(NVRTC 13.0, sm_90, this project's 2-core host); for speed on an H100 (kernel us, inlined ->
outlined): 357.3 -> 292.3 without sincos, 202.5 -> 176.2 with it (OUTLINE_AT's numbers)."""

SHARE_SINCOS = True
"""An element function with sin(v) and cos(v) of one value takes both from one kf::sincos(v)
call (kfuse.codegen.shared_math), where it called sinf and cosf apart: one argument
reduction instead of two, the same values bit for bit. Measured on an H100 (nvFuser's
many-pointwise-ops fusion, 2^24 fp16 values, kernel us; apart -> shared, torch.compile):
two iterations inlined 81.4 -> 47.5 (72.0), eight outlined 292.3 -> 176.2 (227.4)."""

FMA_CONTRACT = True
"""A floating sum or difference of a product, in float or double, that nothing else in the
fusion reads is written as one kf::fma (kfuse.codegen.contraction), where it was a product
and a sum: one rounding where there were two, the same value wherever a kernel computes it,
on the GPU and on the emulator (kernels are compiled with --fmad=false, so the compiler fuses
nothing itself); off, the kernels are those of before. Of the model suite, the norms (layer,
RMS, group, batch, instance), gelu_fwd/bwd, silu_mul_bwd and scale_bias_relu_fwd get fmas.
Measured on an H100 (bf16, whole calls, us; off -> on, torch.compile): layer norm backward
[16384, 4096] 152.3 -> 150.4 (191.2), GELU backward [16384, 8192] 261.8 -> 260.1 (258.6)."""

PREFETCH_NEXT_ROW = True
"""Rows held in shared memory copy their block's next row while the output pass runs
(ReductionKernelSpec.prefetch_next): a block an SM otherwise leaves the memory idle from the
reductions to the next row's loads. Measured on an H200 (bf16, whole calls, us, without ->
with): layer norm backward [2048, 16384] 100.5 -> 94.0, RMS norm backward 78.4 -> 76.2;
dropout + layer norm backward [16384, 4096] 231.0 -> 221.1, [8192, 8192] 299.3 -> 281.4 (its
bool mask copied too: 297.2 -> 303.1 while the mask was loaded when its row started);
dropout + RMS norm backward [8192, 8192] 204.8 -> 201.2; layer norm backward [8192, 8192]
(two blocks an SM) 160.5 -> 164.0, the one slower."""

OUTER_RED_CONSTANT = True
"""An outer kernel loads an input that is the same for every reduced row (red_constant) once a
thread instead of once a row: the NHWC instance norm backward's statistics over [64, 56, 56,
256] bf16 (a float mean per (n, c)) took 8 vectors of 8 floats a batch, 64 registers, and
spilled 16 bytes a thread under its 64-register bound (sm_90 SASS). On an H200 (bf16, whole
calls, us; once a row -> once a thread, torch.compile): instance norm backward NHWC [64, 256,
56, 56] 138.8 -> 134.8 (135.4), [256, 2048, 7, 7] 90.4 -> 89.4; batch norm backward NHWC
[64, 256, 56, 56] 129.3 -> 125.1 (136.5), [256, 2048, 7, 7] 70.7 -> 67.3 (75.9); GELU
backward's reduction over dim 0 [16384, 8192] 223.7 -> 222.8 (255.0)."""

FULL_SLOTS = True
"""Where a row held in registers is exactly the slots of its threads (block_x * batch *
vector elements, one block a row), the kernel tests no row end (ReductionKernelSpec.
full_slots), unless ptxas spills without the tests (kfuse.runtime.backends.spill_fallback).
Measured on an H200 (bf16, whole calls, us; tests kept -> dropped, torch.compile): dropout +
layer norm forward [8192, 8192] 124.6 -> 110.0 (127.2), [16384, 4096] 128.9 -> 109.2
(138.5), [2048, 16384] 71.2 -> 58.4 (96.7), [32768, 1024] 64.2 -> 56.3 (55.7); layer norm
backward [8192, 8192] 220.2 -> 199.8 (244.6); RMS norm forward [32768, 1024] 33.8 -> 33.5
(33.1). Rows held in shared memory keep the tests: the RMS norm forward [2048, 16384] went
36.0 -> 37.4 without them."""

ROWS_WHOLE = True
"""Where the rows are a multiple of block_y and a row takes a warp or more, row_ok is the
constant true (ReductionKernelSpec.rows_whole). Alone it changed little on an H200 (the same
rows as FULL_SLOTS': within 1%, dropout + RMS norm backward [32768, 1024] 114.2 -> 107.8
us); with FULL_SLOTS, the tests of both gone let ptxas drop the per-element branches (SASS
of the dropout + layer norm forward [8192, 8192]: 1648 instructions with the row test alone
dropped, 1744 with the row-end tests alone, 872 with both). Rows of fewer threads than a
warp keep the test: the NCHW instance norms over 7 x 7 (rows of 49, 8 threads a row, 16
rows a block) went from 56.0 to 67.1 us (forward's kernel) and 68.4 to 78.7 (backward's)
without it."""

FROM_WORDS = True
"""bf16 loop values reach the generated element functions as floats converted from the
32-bit words of their vectors (kfuse.codegen.bf16_words, whose docstring has the
measurements), not as 16-bit values each function widens."""

WHOLE_GATHER_ROWS = True
"""A pointwise kernel with an indexed read (an embedding's rows, index_select, gather) whose
rows some launch tiles exactly takes that launch: block_x threads of `unroll` vectors (at
most kfuse.schedule.gather_rows.GATHER_MAX_UNROLL) over grid_x blocks that cover a row with no
vector to spare, chosen where the default launch leaves part of a row's last block idle; and
such a kernel walks its rows without the ragged-end path, loads the inputs that are constant
along a row (an embedding's id) once a row and checks each such index once a row
(kfuse.codegen.whole_rows), where it did so once a vector. Off, both are as before. On before
its measurement because the default launch of the model suite's embedding_fwd [32064, 3072,
8192] bf16 (grid (2, 8192) of 128 threads x 2 vectors over rows of 384 vectors) leaves the
second block of every row half idle and ran below torch.compile on an H100 (kernel 35.7 us
against 33.6, Nsight Compute), whose Triton kernel takes one row a program with its id loaded
once; here 128 threads x 3 vectors, one block a row. The A/B: `tools/kernel_times.py
embedding_fwd:32064x3072x8192 --tc --ab kfuse.switches.WHOLE_GATHER_ROWS=False`."""

REPLAY_RUNS = True
"""A replayed segmented call (kfuse.engine.segmented_replay) runs each stretch of
consecutive kernel segments through one kfuse._C.ReplayRun call (kfuse.engine.replay_runs:
pointers read, the run's intermediates pooled in one allocation, the launches queued from
C++) instead of a step a segment. On before its GPU measurement because the emulator's probe
(tools/segmented_host_cost.py, launches stubbed) went from 14.2-14.7 to 8.2-9.2 us per
segment beyond two; off, each kernel segment is its own step as before. The A/B:
tools/segmented_host_cost.py --device cuda with this switch on and off in one call."""

PART_LOADS_UNCHECKED = True
"""In a kernel of one vector a thread, a part's reads in its register slots (PART_LOCAL_LOADS)
load without their own window checks (kfuse.codegen.windowed.slot_loads): the vector's part
was picked by those same windows (a cat part's reads all have the part's offset and extent
along the cat's axis; the runtime checks that their sizes agree), where each read checked
its window again and merged a fill vector into what it loaded. sm_90 SASS of rope_partial
[8, 32, 4096, 128] bf16 at one vector (PART_SLOTS_ONE_VECTOR), 48 registers: 632 -> 472
instructions. Not at two vectors: there ptxas took more registers for the same kernels
(unbounded, bf16 [4096, 256, 112] rotaries of one table whose parts read 1 to 3 vectors: 40
-> 46, 64 -> 72, float 72 -> 96). On before its measurement (fewer instructions, the same
loads and stores at the same registers); the A/B:
`tools/kernel_times.py rope_partial:8x32x4096x128 --tc --ab
kfuse.switches.PART_LOADS_UNCHECKED=False`."""

WINDOW_CHECK_32 = True
"""A kernel that indexes in int checks a coordinate against a window (a pad's, a cat part's)
with one 32-bit unsigned compare instead of a 64-bit one (kf::window_in32, an optional
runtime part, kf_window32.cuh; kfuse.codegen.windowed.window_check). sm_90 SASS, bf16, as
the backend compiles them: a pad of [1024, 1024, 240] by 8 at each end of its last axis 552
-> 448 instructions at 32 registers; rotaries of one table over [4096, 256, 112] at two
vectors a thread, parts reading 1 to 3 vectors: 40 -> 32, 48 -> 40, 64 -> 56 registers
(float, 3: 72 -> 80); rope_partial at one vector and 48 registers 528 -> 472 instructions.
On before its measurement, as PART_LOADS_UNCHECKED; the A/B: `tools/kernel_times.py
rope_partial:8x32x4096x128 --tc --ab kfuse.switches.WINDOW_CHECK_32=False`."""

PART_SLOTS_ONE_VECTOR = True
"""A pointwise kernel whose cat's part slots (PART_LOCAL_LOADS) two vectors a thread would
hold in more than 24 registers takes one vector a thread, compiled to 48 registers
(kfuse.schedule.pointwise.heavy_part_slots, PART_SLOT_REGISTERS): torch.compile's shape.
rope_partial [8, 32, 4096, 128] bf16 (four slots of 16 bytes) with two vectors took 76
registers, 6 blocks of 128 threads an SM (24 warps), DRAM throughput 48.5% (Nsight Compute,
H100), where torch.compile's kernel had 48 registers and 40 warps (76.9%); with one, 48
registers and 10 blocks (40 warps), 472 sm_90 instructions for its 8 elements (1448 for two
vectors). On before its measurement, torch.compile's shape of the kernel that runs 1.5x
faster; the A/B: `tools/kernel_times.py rope_partial:8x32x4096x128 --tc --ab
kfuse.switches.PART_SLOTS_ONE_VECTOR=False`."""

REGENERATED_READS = True
"""The persistent kernels (inner, inner-outer, outer, a row split over a cluster) compute a
generated read (random numbers, full, iota) again in every pass over the row that reads it,
at the element's offset, instead of holding it in registers or shared memory with the row
(kfuse.codegen.reduction_functions.regenerated_inputs); the schedulers count no held bytes
for it. On before its GPU measurement, by the counts of sm_90 SASS (tools/kernel_sass.py,
h200 profile, bf16; instructions and local bytes a thread, held -> regenerated in whole
Philox groups): dropout + layer norm forward with the mask drawn [32768, 1024] 1160, 32 ->
1032, 0; [8192, 8192] 8280, 32 -> 2448, 32 (the row-end tests kept: without them it
spills too, 1760, 32); [2048, 16384] 11112, 32 (rows in shared memory) -> 2464, 32 (in
registers, the tests kept); dropout + RMS norm forward [32768, 1024] 1088, 32 -> 808, 0;
[8192, 8192] 7384, 32 -> 2280, 0 (the tests kept: without them 1440, 16). The A/B (kernel
us against torch.compile): `tools/kernel_times.py dropout_layernorm_fwd_rng:32768x1024
dropout_layernorm_fwd_rng:16384x4096 dropout_layernorm_fwd_rng:8192x8192
dropout_layernorm_fwd_rng:2048x16384 dropout_rmsnorm_fwd_rng:32768x1024
dropout_rmsnorm_fwd_rng:16384x4096 dropout_rmsnorm_fwd_rng:8192x8192
dropout_rmsnorm_fwd_rng:2048x16384 --tc --ab kfuse.switches.REGENERATED_READS=False`."""

EARLY_OUTPUTS = True
"""The inner persistent kernel stores the full-size outputs that need no reduction's result
(the mask a dropout + norm forward draws and returns) in the row's first pass instead of in
the output pass (kfuse.codegen.early_outputs): the output pass then draws no random numbers
again. On before its GPU measurement, by the counts of sm_90 SASS (tools/kernel_sass.py); the
A/B: `tools/kernel_times.py dropout_layernorm_fwd_rng:32768x1024
dropout_layernorm_fwd_rng:2048x16384 dropout_rmsnorm_fwd_rng:8192x8192
dropout_rmsnorm_fwd_rng:2048x16384 --tc --ab kfuse.switches.EARLY_OUTPUTS=False`."""

REREAD_REVERSED = True
"""Where True, a pointwise kernel of a segmented call that reads again an input the segment
before it read (a normalization's second pass over x after its statistics' reduction: the
softmax over dim 0, the channels-last batch and instance norms, group norm with one group)
takes its rows' blocks from the last (kfuse.codegen.pointwise, PointwiseKernelSpec.
reverse_rows): the reduction read x from its start, so L2 (50 MB on an H100, 60 on an H200)
holds x's tail when the second pass starts, and read first that tail comes from L2 instead of
memory. Measured on an H100 (2026-12-07, at 7648f43, bf16, whole calls, us; as is ->
reversed, torch.compile): channels-last batch norm forward [256, 2048, 7, 7] 62.4 -> 60.6
(71.6), backward 88.0 -> 85.1 (92.6), softmax backward over dim 0 [4096, 16384] 218.0 ->
215.5 (219.2); instance norm forward NHWC [64, 256, 56, 56] 109.3 -> 108.7, group norm
[32, 128, 64, 64] 40.3 -> 40.1; its GPU test passed there. On since emulator campaigns of the
code with it on ran on both device profiles (benchmarks/results/2026-12-07-6f4a3ac-host.md).
The A/B: `tools/kernel_times.py batchnorm_fwd_nhwc:256x2048x7x7 batchnorm_bwd_nhwc:256x2048x7x7
softmax_bwd_dim0:4096x16384 --tc --ab kfuse.switches.REREAD_REVERSED=False`."""

MEMORY_ORDER_LAYOUTS = True
"""A pointwise kernel whose operands all store the reference axes in one order other than the
logical one (a channels-last input and a channels-last stride_order output) walks the axes in
that order (kfuse.codegen.layout.in_memory_order), so they merge into long unit-stride rows
and the fusion is one vectorized pointwise kernel; off, such a fusion is taken for a transpose
along the logical innermost axis (the transpose scheduler; a tile's A side one element wide
where every operand agrees). On before its GPU measurement: the emulator's tests and property
test (tests/test_memory_order_layouts.py) check it. The A/B: `tools/kernel_times.py
scale_bias_relu_channels_last --tc --ab kfuse.switches.MEMORY_ORDER_LAYOUTS=False`."""

# ---- off until measured ----------------------------------------------------------------

ONE_VECTOR_WITHOUT_MATH = False
"""Where True, fusions with no costly op (kfuse.schedule.pointwise.has_costly_math) take one
vector a thread in either schedule: with nothing to compute between loads, twice the blocks
may keep more loads in flight than a second vector a thread. UNROLL_FLAT's note
(kfuse.schedule.pointwise) has the flat schedule's A/B (x * y 129.2 -> 124.9 us,
SiLU-and-multiply 184.5 -> 197.8). Off until measured: written on 2026-12-05 (at 0b57a68),
when the device calls after the first were refused. The A/B: `tools/kernel_times.py
pointwise_mul:16384x8192 bcast_add_contiguous_dim0:16384x8192 scale_bias_relu_fwd:16384x8192
batchnorm_fwd_nhwc:256x2048x7x7 --tc --ab kfuse.switches.ONE_VECTOR_WITHOUT_MATH=True`."""

SPLIT_RAGGED_ROWS = False
"""Where True, rows shorter than kfuse.schedule.short_rows.LONG_ROW whose length is not a power of
two are lengthened too (wants_longer_rows): blocks of a power of two of threads leave part of
such a row's last block idle. An NCHW batch norm's output pass over [64, 256, 56, 56] bf16 has
rows of 3136 elements, 392 vectors, which two blocks of 128 threads of two vectors cover with
512 slots (23% idle); merged with C (one row of 802816 elements) no slot is idle.
FIT_ROW_VECTORS, which narrowed the blocks instead, made those calls 5-11% slower (2026-12-05,
at 0b57a68, benchmarks/results/2026-12-05-0b57a68-h200.md) and was removed. Off until measured,
as ONE_VECTOR_WITHOUT_MATH: `tools/kernel_times.py batchnorm_bwd_nchw:64x256x56x56
batchnorm_fwd_nchw:64x256x56x56 --tc --ab kfuse.switches.SPLIT_RAGGED_ROWS=True`."""

PHILOX_WIDE_PRODUCTS = False
"""Where True, a kernel that draws random numbers computes each Philox round's two 32 x 32-bit
products with one PTX mul.wide.u32 apiece (kf_philox.cuh under KF_PHILOX_WIDE_PRODUCTS, which
kfuse.runtime.runtime_header defines before the random numbers' part), where NVVM writes a
mul.lo and a mul.hi: one IMAD.WIDE.U32 for two IMADs, 20 a Philox call. In sm_90 SASS the
nanoGPT attention forward drawing its mask went from 2040 to 1664 instructions; the dropout +
layer norm forward [2048, 16384] from 1560 to 1400 with 8 bytes of stack frame; the dropout +
RMS norm forward spilled 168 bytes at [2048, 16384] and went from 728 to 912 at [32768, 1024].
So a kernel is compiled with narrow products too and the cheaper (instructions and stack frame)
kept (kfuse.runtime.backends.cuda.fitted_compile): the attention gets wide products, the norms
narrow ones. Issue 57: the drawn masks' rows run 3-5% behind their mask-given twins. Measured
on an H100 (2026-12-07, at 7648f43, bf16, whole calls, us; off -> on, the mask-given twin):
nanoGPT attention forward [16, 16, 512, 512] 185.5 -> 183.5 (181.1), dropout + layer norm
forward [2048, 16384] 80.3 -> 80.1 (76.6): 1% on the attention, within noise on the norm, the
gap to the twins left. Off: too small to take the second compile it costs. The A/B:
`tools/kernel_times.py nanogpt_attn_fwd_rng:16x16x512x512 nanogpt_attn_fwd:16x16x512x512
--tc --ab kfuse.switches.PHILOX_WIDE_PRODUCTS=True`."""

OUTER_CLUSTERS = False
"""Where True, an outer normalization whose columns are too long for one block to hold (a
softmax over dim 0 of [4096, 16384], a channels-last instance norm over 3136 rows) is held
split over the 8 blocks of a thread-block cluster (kfuse.schedule.outer_persistent.
_cluster_shape: 64 threads along the column a block, at most 8 rows a thread; the reductions
combine through distributed shared memory), where the segmenter splits it into a statistics
reduction and a normalizing kernel, which read the input twice from memory. Off until
measured on every row it changes. On an H100 (2026-12-07, bf16, L2 flushed, us; segmented ->
split over a cluster, torch.compile): at 478c30a, with a shape of one block of 512 threads an
SM, softmax backward over dim 0 [4096, 16384] 221.7 -> 249.2 (223.8), channels-last batch norm
forward [256, 2048, 7, 7] 62.9 -> 142.2 (72.4), instance norm forward [64, 256, 56, 56] 109.8
-> 237.6 (115.2); at 627ecbe, swept (tools/params_sweep.py), the softmax backward 218.6 ->
198.3 in the shape _cluster_shape now takes, the batch norm at best 109.9 (12544 rows: more
than 8 a thread, so the segmenter keeps it); at f7468e5, in that shape, on every row it
changes: the softmax backward 215.7 -> 198.5 (218.4), but the softmax forward 150.2 -> 216.1
(184.3) and the channels-last instance norm forward 108.5 -> 228.4 (113.5) and backward 177.1
-> 382.2 (177.9): off. The A/B: `tools/kernel_times.py
softmax_fwd_dim0:4096x16384 softmax_bwd_dim0:4096x16384 instancenorm_fwd_nhwc:64x256x56x56
instancenorm_bwd_nhwc:64x256x56x56 --tc --ab kfuse.switches.OUTER_CLUSTERS=True`."""


# ---- set from the environment -------------------------------------------------------------

_DEFAULTS: dict[str, bool] = {
    name: value for name, value in globals().items() if name.isupper() and isinstance(value, bool)
}
"""Every switch and its value as written above, before KFUSE_SWITCHES."""


def settings() -> dict[str, bool]:
    """Every switch and its value now (what kfuse.engine.program_store keys a program by)."""
    now = globals()
    return {name: now[name] for name in _DEFAULTS}


def changed() -> dict[str, bool]:
    """The switches whose value now differs from _DEFAULTS (set by KFUSE_SWITCHES, a test or an
    A/B run): what a campaign's summary and repro scripts record."""
    return {name: value for name, value in settings().items() if value != _DEFAULTS[name]}


def _apply_environment() -> None:
    """Set the switches KFUSE_SWITCHES names (kfuse.knobs), so that a campaign's worker
    processes and a tool run in a fresh process take the path asked for."""
    from kfuse import knobs
    from kfuse.errors import InputError

    for name, value in knobs.switch_settings():
        if name not in _DEFAULTS:
            raise InputError(
                f"KFUSE_SWITCHES names {name!r}, which is no switch of kfuse.switches; the "
                f"switches are {', '.join(sorted(_DEFAULTS))}"
            )
        globals()[name] = value


_apply_environment()
