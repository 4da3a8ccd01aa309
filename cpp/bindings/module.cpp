// bindings/module.cpp: the kfuse._C extension; registers each binding area in order.
#include "bindings.h"

NB_MODULE(_C, m) {
    m.doc() = "kfuse's C++ core: lazy CUDA driver, NVRTC and CUPTI access, params, kernel "
              "launch, profiling. Importing it loads no CUDA library.";
    kfuse::bindings::register_errors(m);
    kfuse::bindings::register_params(m);
    kfuse::bindings::register_runtime(m);
    kfuse::bindings::register_fast_call(m);
    kfuse::bindings::register_replay_run(m);
    kfuse::bindings::register_profile(m);
}
