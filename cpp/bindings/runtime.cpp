// bindings/runtime.cpp: driver and NVRTC functions, DeviceProperties, Kernel, KernelExecutor.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "../kfuse/cuda_driver.h"
#include "../kfuse/kernel.h"
#include "../kfuse/kernel_executor.h"
#include "../kfuse/nvrtc.h"
#include "bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kfuse {
namespace bindings {
namespace {

// Both resolvers run on the first use of their library, maybe with the GIL released, so
// they take it themselves; a Python failure becomes the library's own error type.
std::string resolve_driver_library() {
    nb::gil_scoped_acquire gil;
    try {
        nb::object path = nb::module_::import_("kfuse.knobs").attr("get")().attr("cuda_library");
        return path.is_none() ? std::string() : nb::cast<std::string>(path);
    } catch (nb::python_error &e) {
        std::string what = e.what();
        e.restore();
        PyErr_Clear();
        throw CudaError(cu::ERROR_INSUFFICIENT_DRIVER, "CUDA_ERROR_INSUFFICIENT_DRIVER", what,
                        "cannot locate the CUDA driver library: " + what);
    }
}

std::string resolve_nvrtc_library() {
    nb::gil_scoped_acquire gil;
    try {
        return nb::cast<std::string>(
            nb::module_::import_("kfuse.runtime.nvrtc_loader").attr("nvrtc_library_path")());
    } catch (nb::python_error &e) {
        std::string what = e.what();
        e.restore();
        PyErr_Clear();
        throw CompileError("cannot locate NVRTC: " + what, "", "");
    }
}

}  // namespace

std::array<int64_t, 3> to_dim3(const std::vector<int64_t> &v, const char *what) {
    if (v.empty() || v.size() > 3)
        throw nb::value_error((std::string(what) + " must have 1 to 3 dimensions").c_str());
    std::array<int64_t, 3> d = {1, 1, 1};
    for (size_t i = 0; i < v.size(); ++i)
        d[i] = v[i];
    return d;
}

// An object with an int `data` (device pointer) and `shape`/`strides` sequences (elements):
// a tensor described by hand, e.g. by the executor for memory it manages itself. Its device
// is not known, so it is not checked against the kernel's (device_id -1).
static bool tensor_from_descriptor(nb::handle item, size_t i, KernelArg &a) {
    if (!nb::hasattr(item, "data") || !nb::hasattr(item, "shape") || !nb::hasattr(item, "strides"))
        return false;
    nb::object data = item.attr("data");
    if (!PyLong_Check(data.ptr()) || PyBool_Check(data.ptr()))
        return false;  // torch/CuPy/NumPy arrays have a non-int .data: they go through DLPack
    auto shape = nb::cast<std::vector<int64_t>>(item.attr("shape"));
    auto strides = nb::cast<std::vector<int64_t>>(item.attr("strides"));
    if (shape.size() != strides.size() || shape.size() > size_t(KernelArg::kMaxRank))
        throw nb::value_error(("argument " + std::to_string(i) + ": shape and strides must have "
                               "the same length, at most " +
                               std::to_string(KernelArg::kMaxRank))
                                  .c_str());
    a.kind = KernelArg::Kind::Tensor;
    a.data = reinterpret_cast<void *>(nb::cast<uintptr_t>(data));
    a.ndim = int(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
        a.shape[d] = shape[d];
        a.stride[d] = strides[d];
    }
    a.device_type = 2;
    a.device_id = -1;
    return true;
}

// Python arguments -> KernelArg: bool, int, float, a tensor descriptor (above), or anything
// DLPack can export.
std::vector<KernelArg> convert_args(nb::handle args) {
    std::vector<KernelArg> out;
    size_t i = 0;
    for (nb::handle item : args) {
        KernelArg a;
        PyObject *o = item.ptr();
        if (PyBool_Check(o)) {
            a.kind = KernelArg::Kind::Bool;
            a.b = (o == Py_True);
        } else if (PyLong_Check(o)) {
            a.kind = KernelArg::Kind::Int;
            if (!nb::try_cast<int64_t>(item, a.i))
                throw nb::value_error(("argument " + std::to_string(i) +
                                       ": the int does not fit 64 bits").c_str());
        } else if (PyFloat_Check(o)) {
            a.kind = KernelArg::Kind::Float;
            a.f = PyFloat_AsDouble(o);
        } else if (tensor_from_descriptor(item, i, a)) {
            // a (data pointer, shape, strides) descriptor, e.g. kfuse.runtime.kernel_args.TensorArg
        } else {
            nb::ndarray<> arr;
            if (!nb::try_cast<nb::ndarray<>>(item, arr, false))
                throw nb::type_error(
                    ("argument " + std::to_string(i) + ": expected a DLPack array (CuPy, torch) "
                     "or a bool, int or float, got " +
                     nb::cast<std::string>(nb::str(item.type().attr("__name__"))))
                        .c_str());
            if (arr.ndim() > size_t(KernelArg::kMaxRank))
                throw nb::value_error(("argument " + std::to_string(i) + ": rank " +
                                       std::to_string(arr.ndim()) + " exceeds kfuse's limit of " +
                                       std::to_string(KernelArg::kMaxRank))
                                          .c_str());
            a.kind = KernelArg::Kind::Tensor;
            a.data = arr.data();
            a.ndim = int(arr.ndim());
            for (size_t d = 0; d < arr.ndim(); ++d) {
                a.shape[d] = int64_t(arr.shape(d));
                a.stride[d] = arr.stride(d);
            }
            a.device_type = arr.device_type();
            a.device_id = arr.device_id();
        }
        out.push_back(a);
        ++i;
    }
    return out;
}

namespace {

nb::bytes to_bytes(const std::string &s) { return nb::bytes(s.data(), s.size()); }

std::string from_bytes(nb::bytes b) { return std::string(b.c_str(), b.size()); }

// `arch`, or the current device's (NVRTC loaded first: arch_for asks it what it supports).
std::string target_arch(const std::optional<std::string> &arch) {
    nvrtc::ensure_loaded();
    if (arch)
        return *arch;
    const auto &dev = driver::device_properties(driver::current_device());
    return nvrtc::arch_for(dev.major, dev.minor);
}

}  // namespace

void register_runtime(nb::module_ &m) {
    driver::set_library_resolver(resolve_driver_library);
    nvrtc::set_library_resolver(resolve_nvrtc_library);

    // ---- driver ----------------------------------------------------------------------------
    m.def("driver_version", &driver::driver_version,
          "The CUDA version the driver supports, e.g. 13000. Raises CudaError without a driver.");
    m.def("device_count", &driver::device_count,
          "Number of visible CUDA devices (0 when the driver sees none). Raises CudaError "
          "when the driver is missing or unusable.");
    m.def("current_device", &driver::current_device,
          "Device of the CUDA context current on this thread, or 0 when there is none.");
    m.def("get_device_properties", &driver::device_properties, "index"_a,
          nb::rv_policy::reference, "Properties of device `index` (queried once, cached).");
    m.def(
        "synchronize",
        [](std::optional<int> device) {
            nb::gil_scoped_release release;
            driver::synchronize(device ? *device : driver::current_device());
        },
        "device"_a = nb::none(), "Wait for all work on the device (None: the current one).");
    m.def("driver_library", &driver::loaded_library,
          "Path or soname of the loaded libcuda, or '' when not loaded yet.");

    nb::class_<driver::DeviceProperties>(m, "DeviceProperties",
                                         "What kfuse needs to know about one CUDA device.")
        .def_ro("index", &driver::DeviceProperties::index)
        .def_ro("name", &driver::DeviceProperties::name)
        .def_ro("major", &driver::DeviceProperties::major)
        .def_ro("minor", &driver::DeviceProperties::minor)
        .def_ro("sm_count", &driver::DeviceProperties::sm_count)
        .def_ro("max_threads_per_block", &driver::DeviceProperties::max_threads_per_block)
        .def_ro("max_threads_per_sm", &driver::DeviceProperties::max_threads_per_sm)
        .def_ro("max_blocks_per_sm", &driver::DeviceProperties::max_blocks_per_sm)
        .def_ro("warp_size", &driver::DeviceProperties::warp_size)
        .def_prop_ro("max_block_dim",
                     [](const driver::DeviceProperties &p) {
                         return nb::make_tuple(p.max_block_dim[0], p.max_block_dim[1],
                                               p.max_block_dim[2]);
                     })
        .def_prop_ro("max_grid_dim",
                     [](const driver::DeviceProperties &p) {
                         return nb::make_tuple(p.max_grid_dim[0], p.max_grid_dim[1],
                                               p.max_grid_dim[2]);
                     })
        .def_ro("shared_mem_per_block", &driver::DeviceProperties::shared_mem_per_block)
        .def_ro("shared_mem_per_block_optin",
                &driver::DeviceProperties::shared_mem_per_block_optin)
        .def_ro("shared_mem_per_sm", &driver::DeviceProperties::shared_mem_per_sm)
        .def_ro("regs_per_block", &driver::DeviceProperties::regs_per_block)
        .def_ro("regs_per_sm", &driver::DeviceProperties::regs_per_sm)
        .def_ro("l2_cache_bytes", &driver::DeviceProperties::l2_cache_bytes)
        .def_ro("total_memory", &driver::DeviceProperties::total_memory)
        .def_ro("clock_khz", &driver::DeviceProperties::clock_khz)
        .def_ro("memory_clock_khz", &driver::DeviceProperties::memory_clock_khz)
        .def_ro("memory_bus_width", &driver::DeviceProperties::memory_bus_width)
        .def_prop_ro("peak_bandwidth_gbs", &driver::DeviceProperties::peak_bandwidth_gbs,
                     "2 * memory clock * bus width / 8, in GB/s (0 if the driver hides them).")
        .def("__repr__", &driver::DeviceProperties::repr);

    // ---- NVRTC -----------------------------------------------------------------------------
    m.def("set_nvrtc_library", &nvrtc::set_library, "path"_a,
          "Use this libnvrtc (before the first compile; kfuse.runtime.nvrtc_loader finds it by "
          "default).");
    m.def("nvrtc_library", &nvrtc::loaded_library,
          "Path of the loaded libnvrtc, or '' when not loaded yet.");
    m.def("nvrtc_version", &nvrtc::version, "(major, minor) of the loaded NVRTC.");
    m.def("nvrtc_supported_archs", &nvrtc::supported_archs,
          "Compute capabilities NVRTC can target, e.g. [75, 80, 86, 89, 90, ...].");
    m.def(
        "compile_to_cubin",
        [](const std::string &source, const std::string &name, std::optional<std::string> arch,
           std::optional<std::vector<std::string>> options,
           std::optional<nvrtc::Headers> headers) {
            std::string target = target_arch(arch), cubin;
            {
                nb::gil_scoped_release release;
                cubin = nvrtc::compile_to_cubin(source, name, target,
                                                options.value_or(std::vector<std::string>{}),
                                                headers.value_or(nvrtc::Headers{}));
            }
            return to_bytes(cubin);
        },
        "source"_a, "name"_a = "kernel.cu", "arch"_a = nb::none(), "options"_a = nb::none(),
        "headers"_a = nb::none(),
        "Compile CUDA C++ to a cubin for `arch` ('sm_80'; None: the current device); "
        "`headers`: (name, text) pairs the source may #include. Raises CompileError with "
        "NVRTC's log and the numbered source.");
    m.def(
        "compile_to_ptx",
        [](const std::string &source, const std::string &name, std::optional<std::string> arch,
           std::optional<std::vector<std::string>> options,
           std::optional<nvrtc::Headers> headers) {
            std::string target = target_arch(arch);
            nb::gil_scoped_release release;
            return nvrtc::compile_to_ptx(source, name, target,
                                         options.value_or(std::vector<std::string>{}),
                                         headers.value_or(nvrtc::Headers{}));
        },
        "source"_a, "name"_a = "kernel.cu", "arch"_a = nb::none(), "options"_a = nb::none(),
        "headers"_a = nb::none(),
        "The PTX NVRTC makes of CUDA C++ for `arch` ('sm_90' or 'compute_90'; None: the "
        "current device), with the same options a cubin would be compiled with. Raises "
        "CompileError like compile_to_cubin.");

    // ---- Kernel ----------------------------------------------------------------------------
    nb::class_<Kernel>(m, "Kernel",
                       "A cubin's kernel on one device; the module loads on first use.")
        .def(
            "__init__",
            [](Kernel *self, nb::bytes cubin, const std::string &name, int device) {
                new (self) Kernel(from_bytes(cubin), name, device);
            },
            "cubin"_a, "kernel_name"_a, "device"_a = 0)
        .def_prop_ro("name", &Kernel::name)
        .def_prop_ro("device", &Kernel::device)
        .def_prop_ro("num_regs", &Kernel::num_regs)
        .def_prop_ro("static_shared_mem", &Kernel::static_shared_mem)
        .def_prop_ro("local_mem", &Kernel::local_mem)
        .def_prop_ro("max_threads_per_block", &Kernel::max_threads_per_block)
        .def_prop_ro("param_sizes", &Kernel::param_sizes,
                     "Byte size of each parameter (cuFuncGetParamInfo).")
        .def(
            "launch",
            [](Kernel &k, const std::vector<int64_t> &grid, const std::vector<int64_t> &block,
               int64_t shared_mem, uintptr_t stream, nb::handle args) {
                k.launch(to_dim3(grid, "grid"), to_dim3(block, "block"), shared_mem, stream,
                         convert_args(args));
            },
            "grid"_a, "block"_a, "shared_mem"_a, "stream"_a, "args"_a,
            "Launch with args packed by parameter size (docs/INTERFACES.md, Kernel ABI).");

    // ---- KernelExecutor --------------------------------------------------------------------
    nb::class_<KernelExecutor>(
        m, "KernelExecutor",
        "Compiles one raw CUDA kernel and runs it. Launch constraints given to compile() are "
        "defaults that those given to run() override field by field.")
        .def(nb::init<>())
        .def(
            "compile",
            [](KernelExecutor &self, const std::string &source, const std::string &kernel_name,
               std::optional<LaunchParams> launch_constraints,
               std::optional<CompileParams> compile_params) {
                nvrtc::ensure_loaded();
                nb::gil_scoped_release release;
                self.compile(source, kernel_name, launch_constraints, compile_params);
            },
            "source"_a, "kernel_name"_a, "launch_constraints"_a = nb::none(),
            "compile_params"_a = nb::none())
        .def(
            "run",
            [](KernelExecutor &self, nb::handle args,
               std::optional<LaunchParams> launch_constraints, std::optional<uintptr_t> stream) {
                self.run(convert_args(args), launch_constraints, stream.value_or(0));
            },
            "args"_a, "launch_constraints"_a = nb::none(), "stream"_a = nb::none(),
            "Launch on `stream` (None here: the legacy default stream 0).")
        .def_static("default_options", &KernelExecutor::default_options,
                    "NVRTC options kfuse always passes before CompileParams' own.")
        .def_prop_ro("is_compiled", &KernelExecutor::is_compiled)
        .def_prop_ro("kernel_name", &KernelExecutor::kernel_name)
        .def_prop_ro("source", &KernelExecutor::source)
        .def_prop_ro("arch", &KernelExecutor::arch)
        .def_prop_ro("cubin", [](const KernelExecutor &e) { return to_bytes(e.cubin()); })
        .def_prop_ro("launch_constraints", &KernelExecutor::launch_constraints)
        .def_prop_ro("compile_params", &KernelExecutor::compile_params)
        .def("kernel", &KernelExecutor::kernel, "device"_a, nb::rv_policy::reference_internal,
             "The Kernel loaded on `device`.");
}

}  // namespace bindings
}  // namespace kfuse
