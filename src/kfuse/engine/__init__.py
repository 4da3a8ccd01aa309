"""What drives a fusion from its definition to its launches, stage by stage (compiler: the
stages; segmenter and boundary_views: partition; program, segment_kernels: what a compiled
fusion is; executor, signature, fast_path, segments: a call; dump: the stages written out).
The layers: frontend -> engine -> schedule -> codegen -> runtime -> ir."""
