"""The shapes each family is swept over, chosen for the time budget.

The suite must run in about 5 minutes by default and about 90 s with --quick on one H200,
torch.compile's compile time included (a few seconds per case and shape, compiled fresh per
shape): 86 case-shapes by default; --quick runs one shape per case (43), since two per case
would not fit in 90 s. The 11 pointwise case-shapes (one shape each) add about 15 s to either
(a quick run of the 31 others took 68 s on an H200); RoPE's one shape, a few more. nvFuser
sweeps far more (global_params.generate_input_sizes): batch 16..16384 by hidden 768..73728
for 2-D inputs, and [N, C, H, W] from tiny to ResNet sizes for 4-D ones; these are a few of
its points.

Every default shape but a few spatial ones moves more than the 50 MB L2 per tensor; the timer
flushes L2 before each call anyway.
"""

from __future__ import annotations

# [batch x sequence, hidden]: hidden 1024 .. 16384, rows 2048 .. 32768.
NORM_2D = ((32768, 1024), (16384, 4096), (8192, 8192), (2048, 16384))
NORM_2D_QUICK = ((16384, 4096),)

# Softmax over either axis of the same kind of [rows, columns] tensor.
SOFTMAX = ((32768, 1024), (16384, 4096), (4096, 16384))
SOFTMAX_QUICK = ((16384, 4096),)

# [N, C, H, W] (a channels-last case gets the same sizes as [N, H, W, C]): ResNet-like
# layers, one wide and shallow, one deep and small.
SPATIAL = ((64, 256, 56, 56), (256, 2048, 7, 7))
SPATIAL_QUICK = ((64, 256, 56, 56),)

# Group norm as in diffusion U-Nets and ResNets ([N, C, H, W]; C divisible by 32).
GROUPNORM = ((32, 128, 64, 64), (64, 256, 56, 56))
GROUPNORM_QUICK = ((64, 256, 56, 56),)

# The tests: tiny shapes for the host emulator (each kernel is compiled by g++), mid ones
# for the GPU test.
TEST_2D = (12, 80)
GPU_TEST_2D = (1024, 4096)
TEST_SPATIAL = (2, 32, 3, 5)  # C = 32: every group count divides it
GPU_TEST_SPATIAL = (32, 128, 28, 28)

# Transposes of [B, M, N] (nvFuser's test_transpose.py sweeps 3-D sizes of
# generate_input_sizes(dims=3)): a short batch of long planes, 3 x 268 MB (bf16) moved.
# [B, M, N] of three shapes: the moved axes long and square, a long innermost axis, and short
# axes of 512 (bf16 and float32 each: the family sweeps its dtypes).
TRANSPOSE = ((16, 4096, 2048), (8, 1024, 8192), (256, 512, 512))
TRANSPOSE_QUICK = ((16, 4096, 2048),)
TEST_3D = (36, 40, 33)  # the emulator test: every tile axis at least a warp long
GPU_TEST_3D = (8, 1024, 520)  # not a multiple of the tile: the guards run

# Broadcast add of a vector to a [rows, columns] input stored with axis 0 fastest.
BCAST_ADD = ((16384, 8192), (2048, 65536))  # axis 0 (the fastest in memory) long, then short
BCAST_ADD_QUICK = ((16384, 8192),)
TEST_2D_TILED = (67, 131)

# Pointwise fusions (and gelu_bwd_reduction's pointwise + sum) of [batch, hidden]: one size,
# every [16384, 8192] input 268 MB in bf16 (537 MB in float32), over five times the L2.
POINTWISE = ((16384, 8192),)
POINTWISE_QUICK = ((16384, 8192),)
