// bindings/params.cpp: LaunchParams, CompileParams and the HeuristicParams family.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <set>

#include "../kfuse/heuristic_params.h"
#include "../kfuse/params_error.h"
#include "bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kfuse {
namespace bindings {
namespace {

using OptInt = std::optional<int64_t>;

// ---- dict conversion -------------------------------------------------------------------

void reject_unknown(nb::dict d, const std::set<std::string> &known, const char *what) {
    for (auto [key, value] : d) {
        std::string k = nb::cast<std::string>(nb::str(key));
        if (!known.count(k))
            throw ParamsError((std::string(what) + ": unknown field '" + k + "'").c_str());
    }
}

template <class T>
T cast_field(nb::handle value, const char *owner, const char *name) {
    T out{};
    if constexpr (std::is_same_v<T, bool>) {
        if (!PyBool_Check(value.ptr()))
            throw ParamsError((std::string(owner) + "." + name + " must be a bool").c_str());
    }
    if (!nb::try_cast<T>(value, out))
        throw ParamsError((std::string(owner) + "." + name + " has the wrong type: " +
                              nb::cast<std::string>(nb::repr(value)))
                                 .c_str());
    return out;
}

nb::dict launch_to_dict(const LaunchParams &p) {
    nb::dict d;
    d["grid_x"] = p.grid_x;
    d["grid_y"] = p.grid_y;
    d["grid_z"] = p.grid_z;
    d["block_x"] = p.block_x;
    d["block_y"] = p.block_y;
    d["block_z"] = p.block_z;
    d["shared_mem"] = p.shared_mem;
    return d;
}

LaunchParams launch_from_dict(nb::dict d) {
    reject_unknown(d, {"grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_mem"},
                   "LaunchParams");
    LaunchParams p;
    std::pair<const char *, OptInt *> dims[] = {{"grid_x", &p.grid_x},   {"grid_y", &p.grid_y},
                                                {"grid_z", &p.grid_z},   {"block_x", &p.block_x},
                                                {"block_y", &p.block_y}, {"block_z", &p.block_z}};
    for (auto &[name, slot] : dims)
        if (d.contains(name))
            *slot = cast_field<OptInt>(d[name], "LaunchParams", name);
    if (d.contains("shared_mem"))
        p.shared_mem = cast_field<int64_t>(d["shared_mem"], "LaunchParams", "shared_mem");
    p.validate();
    return p;
}

nb::dict compile_to_dict(const CompileParams &p) {
    nb::dict d;
    d["index_type"] = p.index_type;
    d["maxrregcount"] = p.maxrregcount;
    d["arch"] = p.arch;
    d["extra_options"] = p.extra_options;
    return d;
}

CompileParams compile_from_dict(nb::dict d) {
    reject_unknown(d, {"index_type", "maxrregcount", "arch", "extra_options"}, "CompileParams");
    CompileParams p;
    if (d.contains("index_type"))
        p.index_type = cast_field<std::string>(d["index_type"], "CompileParams", "index_type");
    if (d.contains("maxrregcount"))
        p.maxrregcount = cast_field<OptInt>(d["maxrregcount"], "CompileParams", "maxrregcount");
    if (d.contains("arch"))
        p.arch = cast_field<std::optional<std::string>>(d["arch"], "CompileParams", "arch");
    if (d.contains("extra_options"))
        p.extra_options = cast_field<std::vector<std::string>>(d["extra_options"],
                                                               "CompileParams", "extra_options");
    p.validate();
    return p;
}

// ---- HeuristicParams field tables -------------------------------------------------------

template <class P>
std::set<std::string> field_names() {
    std::set<std::string> names;
    std::apply([&](const auto &...f) { (names.insert(f.name), ...); }, P::fields());
    return names;
}

template <class P>
void assign_fields(P &p, nb::dict d) {
    std::apply(
        [&](const auto &...f) {
            ((d.contains(f.name)
                  ? void(p.*(f.member) = cast_field<std::remove_reference_t<decltype(p.*(f.member))>>(
                             d[f.name], p.class_name(), f.name))
                  : void()),
             ...);
        },
        P::fields());
}

// A read-write attribute whose setter checks the value's type itself (cast_field), so that a
// wrong type is a ParamsError naming the field instead of nanobind's generic TypeError.
template <class C, class T, class Cls>
void def_field(Cls &cls, const char *owner, const char *name, T C::*member,
               const char *doc = "") {
    cls.def_prop_rw(
        name, [member](C &c) -> T & { return c.*member; },
        [member, owner, name](C &c, nb::handle value) {
            c.*member = cast_field<T>(value, owner, name);
        },
        // A params field (lparams) is held by reference, as def_rw would; numbers are copied.
        nb::for_getter(nb::rv_policy::reference_internal),
        nb::for_setter(nb::arg("value").none()),  // None too: optional fields take it
        doc);  // nanobind reads the string: never nullptr
}

template <class P, class Cls>
void bind_fields(Cls &cls, const char *owner) {
    std::apply([&](const auto &...f) { (def_field(cls, owner, f.name, f.member), ...); },
               P::fields());
}

nb::dict params_to_dict(const HeuristicParams &p) {
    nb::dict d;
    d["scheduler_type"] = p.scheduler_type();
    for (const auto &[name, value] : p.field_values()) {
        if (auto b = std::get_if<bool>(&value))
            d[name] = *b;
        else
            d[name] = std::get<int64_t>(value);
    }
    d["lparams"] = launch_to_dict(p.lparams);
    d["cparams"] = compile_to_dict(p.cparams);
    return d;
}

// Which class a scheduler_type belongs to; types not listed are matched by their fields.
const char *class_for_type(const std::string &t) {
    if (t == "pointwise" || t == "transpose")
        return "PointwiseParams";
    if (t == "reduction" || t == "inner_persistent" || t == "outer_persistent" ||
        t == "inner_outer_persistent")
        return "ReductionParams";
    if (t == "none")
        return "HeuristicParams";
    return nullptr;
}

template <class P>
std::unique_ptr<HeuristicParams> make_from(const std::string &type, nb::dict fields) {
    auto p = std::make_unique<P>(type);
    if constexpr (!std::is_same_v<P, HeuristicParams>)
        assign_fields(*p, fields);
    return p;
}

std::unique_ptr<HeuristicParams> params_from_dict(nb::dict d) {
    if (!d.contains("scheduler_type"))
        throw ParamsError("HeuristicParams.from_dict: the dict has no 'scheduler_type'");
    std::string type = cast_field<std::string>(d["scheduler_type"], "HeuristicParams",
                                               "scheduler_type");
    nb::dict fields;
    for (auto [key, value] : d) {
        std::string k = nb::cast<std::string>(nb::str(key));
        if (k != "scheduler_type" && k != "lparams" && k != "cparams")
            fields[key] = value;
    }
    std::set<std::string> keys;
    for (auto [key, value] : fields)
        keys.insert(nb::cast<std::string>(nb::str(key)));
    auto covers = [&](const std::set<std::string> &names) {
        for (const auto &k : keys)
            if (!names.count(k))
                return false;
        return true;
    };
    std::string cls = class_for_type(type) ? class_for_type(type) : "";
    if (cls.empty()) {
        if (keys.empty())
            cls = "HeuristicParams";
        else if (covers(field_names<PointwiseParams>()))
            cls = "PointwiseParams";
        else if (covers(field_names<ReductionParams>()))
            cls = "ReductionParams";
        else
            throw ParamsError(("HeuristicParams.from_dict: no params class has all the "
                                   "fields given for scheduler_type '" + type + "'").c_str());
    }
    std::unique_ptr<HeuristicParams> p;
    if (cls == "PointwiseParams") {
        reject_unknown(fields, field_names<PointwiseParams>(), "PointwiseParams");
        p = make_from<PointwiseParams>(type, fields);
    } else if (cls == "ReductionParams") {
        reject_unknown(fields, field_names<ReductionParams>(), "ReductionParams");
        p = make_from<ReductionParams>(type, fields);
    } else {
        reject_unknown(fields, {}, "HeuristicParams");
        p = make_from<HeuristicParams>(type, fields);
    }
    if (d.contains("lparams"))
        p->lparams = launch_from_dict(nb::cast<nb::dict>(d["lparams"]));
    if (d.contains("cparams"))
        p->cparams = compile_from_dict(nb::cast<nb::dict>(d["cparams"]));
    return p;
}

template <class P>
void init_with_kwargs(P *self, const std::string &scheduler_type, nb::kwargs kwargs) {
    nb::dict fields;
    for (auto [key, value] : kwargs)
        fields[key] = value;
    P tmp(scheduler_type);
    auto known = field_names<P>();
    for (auto [key, value] : fields) {
        std::string k = nb::cast<std::string>(nb::str(key));
        if (!known.count(k))
            throw ParamsError((std::string(tmp.class_name()) +
                                  "() got an unexpected keyword argument '" + k + "'").c_str());
    }
    assign_fields(tmp, fields);
    new (self) P(std::move(tmp));
}

}  // namespace

void register_params(nb::module_ &m) {
    auto launch = nb::class_<LaunchParams>(
        m, "LaunchParams",
        "Grid and block dimensions and dynamic shared memory for a launch. Unset (None) "
        "dimensions are 1 at launch; grid_x and block_x must be given by compile-time or "
        "run-time constraints. Built without touching a device; checked against the device "
        "when a kernel is launched.")
        .def(
            "__init__",
            [](LaunchParams *self, OptInt gx, OptInt gy, OptInt gz, OptInt bx, OptInt by,
               OptInt bz, int64_t smem) {
                LaunchParams p;
                p.grid_x = gx, p.grid_y = gy, p.grid_z = gz;
                p.block_x = bx, p.block_y = by, p.block_z = bz;
                p.shared_mem = smem;
                p.validate();
                new (self) LaunchParams(p);
            },
            nb::kw_only(), "grid_x"_a = nb::none(), "grid_y"_a = nb::none(),
            "grid_z"_a = nb::none(), "block_x"_a = nb::none(), "block_y"_a = nb::none(),
            "block_z"_a = nb::none(), "shared_mem"_a = 0)
        .def_prop_ro("grid", [](const LaunchParams &p) {
            auto g = p.grid();
            return nb::make_tuple(g[0], g[1], g[2]);
        }, "(x, y, z) grid dimensions with unset ones as 1.")
        .def_prop_ro("block", [](const LaunchParams &p) {
            auto b = p.block();
            return nb::make_tuple(b[0], b[1], b[2]);
        }, "(x, y, z) block dimensions with unset ones as 1.")
        .def_prop_ro("threads_per_block", &LaunchParams::threads_per_block)
        .def("merged_with", &LaunchParams::merged_with, "other"_a,
             "A copy with every dimension `other` sets (and a non-zero shared_mem) replaced.")
        .def("validate", &LaunchParams::validate,
             "Raise ValueError for a dimension < 1 or a negative shared_mem.")
        .def("to_dict", &launch_to_dict)
        .def_static("from_dict", &launch_from_dict, "d"_a)
        .def("__eq__", [](const LaunchParams &a, const LaunchParams &b) { return a == b; },
             nb::is_operator())
        .def("__ne__", [](const LaunchParams &a, const LaunchParams &b) { return a != b; },
             nb::is_operator())
        .def("__hash__", &LaunchParams::hash)
        .def("__repr__", &LaunchParams::repr)
        .def("__copy__", [](const LaunchParams &p) { return p; })
        .def("__deepcopy__", [](const LaunchParams &p, nb::handle) { return p; }, "memo"_a);
    def_field(launch, "LaunchParams", "grid_x", &LaunchParams::grid_x);
    def_field(launch, "LaunchParams", "grid_y", &LaunchParams::grid_y);
    def_field(launch, "LaunchParams", "grid_z", &LaunchParams::grid_z);
    def_field(launch, "LaunchParams", "block_x", &LaunchParams::block_x);
    def_field(launch, "LaunchParams", "block_y", &LaunchParams::block_y);
    def_field(launch, "LaunchParams", "block_z", &LaunchParams::block_z);
    def_field(launch, "LaunchParams", "shared_mem", &LaunchParams::shared_mem);

    auto compile = nb::class_<CompileParams>(
        m, "CompileParams",
        "How a kernel is compiled: index_type ('int32' or 'int64'), maxrregcount (None: NVRTC "
        "decides), arch ('sm_90'...; None: the device's own), extra NVRTC options.")
        .def(
            "__init__",
            [](CompileParams *self, const std::string &index_type, OptInt maxrregcount,
               std::optional<std::string> arch,
               std::optional<std::vector<std::string>> extra_options) {
                CompileParams p;
                p.index_type = index_type;
                p.maxrregcount = maxrregcount;
                p.arch = arch;
                p.extra_options = extra_options.value_or(std::vector<std::string>{});
                p.validate();
                new (self) CompileParams(p);
            },
            nb::kw_only(), "index_type"_a = "int64", "maxrregcount"_a = nb::none(),
            "arch"_a = nb::none(), "extra_options"_a = nb::none())
        .def_prop_rw(
            "index_type", [](const CompileParams &p) { return p.index_type; },
            [](CompileParams &p, const std::string &t) {
                CompileParams::check_index_type(t);
                p.index_type = t;
            })
        .def("nvrtc_options", &CompileParams::nvrtc_options,
             "The NVRTC options these parameters add (the architecture is passed apart).")
        .def("validate", &CompileParams::validate)
        .def("to_dict", &compile_to_dict)
        .def_static("from_dict", &compile_from_dict, "d"_a)
        .def("__eq__", [](const CompileParams &a, const CompileParams &b) { return a == b; },
             nb::is_operator())
        .def("__ne__", [](const CompileParams &a, const CompileParams &b) { return a != b; },
             nb::is_operator())
        .def("__hash__", &CompileParams::hash)
        .def("__repr__", &CompileParams::repr)
        .def("__copy__", [](const CompileParams &p) { return p; })
        .def("__deepcopy__", [](const CompileParams &p, nb::handle) { return p; }, "memo"_a);
    def_field(compile, "CompileParams", "maxrregcount", &CompileParams::maxrregcount);
    def_field(compile, "CompileParams", "arch", &CompileParams::arch);
    def_field(compile, "CompileParams", "extra_options", &CompileParams::extra_options,
              "A copy of the list: assign a new list to change it.");

    auto heuristic = nb::class_<HeuristicParams>(
        m, "HeuristicParams",
        "What a scheduler decided for one kernel: launch (lparams) and compile (cparams) "
        "parameters plus the subclass's fields. scheduler_type is fixed at construction.")
        .def(nb::init<std::string>(), "scheduler_type"_a = "none")
        .def_prop_ro("scheduler_type", &HeuristicParams::scheduler_type)
        .def("to_dict", &params_to_dict,
             "{'scheduler_type': ..., <fields>..., 'lparams': {...}, 'cparams': {...}}")
        .def_static("from_dict", &params_from_dict, "d"_a,
                    "Rebuild params from to_dict() output, as the right subclass.")
        .def("copy", &HeuristicParams::clone)
        .def("__copy__", &HeuristicParams::clone)
        .def("__deepcopy__", [](const HeuristicParams &p, nb::handle) { return p.clone(); },
             "memo"_a)
        .def("__eq__", [](const HeuristicParams &a, const HeuristicParams &b) { return a == b; },
             nb::is_operator())
        .def("__ne__", [](const HeuristicParams &a, const HeuristicParams &b) { return a != b; },
             nb::is_operator())
        .def("__hash__", &HeuristicParams::hash)
        .def("__repr__", &HeuristicParams::repr);
    def_field(heuristic, "HeuristicParams", "lparams", &HeuristicParams::lparams);
    def_field(heuristic, "HeuristicParams", "cparams", &HeuristicParams::cparams);

    auto pointwise = nb::class_<PointwiseParams, HeuristicParams>(
        m, "PointwiseParams",
        "Pointwise schedule: vectorization and unroll factors, break_point (-1: 1-D schedule; "
        "else the axes before it map to y), block and grid shape, split_grid_y. Keyword "
        "arguments set fields: PointwiseParams(vectorization_factor=4).");
    pointwise.def("__init__", &init_with_kwargs<PointwiseParams>,
                  "scheduler_type"_a = "pointwise", "kwargs"_a);
    bind_fields<PointwiseParams>(pointwise, "PointwiseParams");

    auto reduction = nb::class_<ReductionParams, HeuristicParams>(
        m, "ReductionParams",
        "Reduction/normalization schedule: reduction layout (fastest_dim_reduction), "
        "persistence, block/grid shape, vectorize/unroll factors for the iteration and "
        "reduction domains, and cross-block / cross-grid flags. Keyword arguments set fields.");
    reduction.def("__init__", &init_with_kwargs<ReductionParams>,
                  "scheduler_type"_a = "reduction", "kwargs"_a);
    bind_fields<ReductionParams>(reduction, "ReductionParams");
}

}  // namespace bindings
}  // namespace kfuse
