"""kfuse's runtime: what runs a compiled fusion on every call, and what it runs on.

program (the Program kinds and how each runs), executor (FusionExecutorCache: input signature
-> Program, the fast path), segments (a segmented fusion's runner), fast_path (the C++ packed
call of a cached signature), launch (generated kernels, their launches and operands), info
(RuntimeInfo: one call's inputs as the compiler sees them), arrays (the frameworks' arrays:
layouts, allocation, streams, poison), device (DeviceDescription and named profiles),
kernel_args, kernel_cache and disk_cache (compiled kernels on disk), backends (the CUDA and
emulator compile targets), nvrtc_loader, kernel_executor (hand-written kernels).
Nothing here is imported by `import kfuse` until it is used, and nothing touches CUDA then.
"""
