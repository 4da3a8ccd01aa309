#!/usr/bin/env python3
"""kfuse campaign: kfuse error in a pointwise fusion.

Found by: kfuse campaign --device emulator --dtypes Float Half BFloat16 Double Int32 Int Bool ComplexFloat ComplexDouble Float8_e4m3fn --budget 700 --workers 2 --out /tmp/camp-v7 --seed 1176415173
round 5 of 5 examples, after 18 earlier examples in worker process 3347
Inputs: T0 torch Float (1, 1) strides (1, 1) on cpu; T1 torch Float (1, 1) strides (1, 1) on cpu; T2 torch Float (1, 1) strides (1, 1) on cpu; S0 = -2.0; T3 torch Float8_e4m3fn (1, 1) strides (1, 1) on cpu; T4 torch Int (1,) strides (1,) on cpu

EmulatorError: the host compiler rejected kernel 'kfuse_pointwise_f8f55c15190a4599_ixxxb'
kernel.cu: In instantiation of 'T kf::index_fill() [with T = float8_e4m3fn]':
kernel.cu:1788:38:   required from 'T kf::indexed_load(const Tensor<T, N, Index>&, Off, Index, Index) [with T = float8_e4m3fn; int N = 2; Index = int; Off = int]'
kernel.cu:1877:40:   required from here
kernel.cu:1745:10: error: no matching function for call to 'kf::float8_e4m3fn::float8_e4m3fn(int)'
kernel.cu:1549:8: note: candidate: 'kf::float8_e4m3fn::float8_e4m3fn()'
kernel.cu:1549:8: note:   candidate expects 0 arguments, 1 provided
kernel.cu:1549:8: note: candidate: 'constexpr kf::float8_e4m3fn::float8_e4m3fn(const kf::float8_e4m3fn&)'
kernel.cu:1549:8: note:   no known conversion for argument 1 from 'int' to 'const kf::float8_e4m3fn&'
kernel.cu:1549:8: note: candidate: 'constexpr kf::float8_e4m3fn::float8_e4m3fn(kf::float8_e4m3fn&&)'
kernel.cu:1549:8: note:   no known conversion for argument 1 from 'int' to 'kf::float8_e4m3fn&&'

kernel source around line 1745:
  1742 | // position (kfuse.runtime.index_checks).
  1743 | template <typename T>
  1744 | __device__ __forceinline__ T index_fill() {
> 1745 |   return (T)0;
  1746 | }
  1747 | template <>
  1748 | __device__ __forceinline__ float index_fill<float>() {
"""
import sys
from pathlib import Path

from kfuse import DataType, FusionDefinition  # noqa: F401 (the definition uses both)
from kfuse.campaign.repro import replay

def kfuse_fusion(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    T1 = fd.define_tensor(shape=[1, -1], dtype=DataType.Float)
    T2 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    S0 = fd.define_scalar(None, dtype=DataType.Double)
    T3 = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float8_e4m3fn)
    T4 = fd.define_tensor(shape=[-1], dtype=DataType.Int)
    T5 = fd.ops.index_select(T3, T4, dim=0)
    T6 = fd.ops.cast(T0, dtype=DataType.Bool)
    T7 = fd.ops.logical_not(T6)
    fd.add_output(T7)
    fd.add_output(T5)

with FusionDefinition() as fd:
    kfuse_fusion(fd)

if __name__ == "__main__":
    sys.exit(replay(fd, Path(__file__).with_suffix(".npz"), sys.argv[1:]))
