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

// Constructors take keyword arguments only; a positional one is a ParamsError, as a wrong
// keyword is.
void reject_positional(nb::args args, const char *what) {
    if (args.size() != 0)
        throw ParamsError((std::string(what) + "() takes keyword arguments only, got " +
                           std::to_string(args.size()) + " positional")
                              .c_str());
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

// kfuse.schedule.types.SchedulerType, which Python code compares scheduler types with (as
// nvFuser's HeuristicParams.scheduler_type is its SchedulerType enum). Imported when first
// needed, not when _C loads: kfuse imports _C before its schedulers.
nb::object scheduler_type_enum() {
    return nb::module_::import_("kfuse.schedule.types").attr("SchedulerType");
}

// A scheduler type given as a SchedulerType or by its name, as its name. Anything else, or a
// name no SchedulerType has (the scheduler_type property could not give it back), is a
// ParamsError naming `owner`.
std::string scheduler_type_name(nb::handle value, const char *owner) {
    nb::object cls = scheduler_type_enum();
    int is_member = PyObject_IsInstance(value.ptr(), cls.ptr());
    if (is_member < 0)
        throw nb::python_error();
    if (is_member)
        return nb::cast<std::string>(value.attr("value"));
    auto name = cast_field<std::string>(value, owner, "scheduler_type");
    std::string known;
    for (nb::handle member : cls) {
        auto member_name = nb::cast<std::string>(member.attr("value"));
        if (member_name == name)
            return name;
        known += (known.empty() ? "" : ", ") + member_name;
    }
    throw ParamsError((std::string(owner) + ": unknown scheduler_type '" + name +
                       "'; the types are " + known)
                          .c_str());
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
    // By name, as lparams and cparams are dicts: the dict is plain data (JSON, a dump);
    // from_dict takes the name or the SchedulerType.
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
    std::string type = scheduler_type_name(d["scheduler_type"], "HeuristicParams.from_dict");
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

// A params constructor's arguments: scheduler_type (the one positional argument, or a
// keyword) and the fields. Anything else, or a wrong type, is a ParamsError naming it.
std::string scheduler_type_of(nb::args args, nb::dict &fields, const char *what,
                              const char *default_type) {
    if (args.size() > 1)
        throw ParamsError((std::string(what) + "() takes at most one positional argument "
                           "(scheduler_type), got " + std::to_string(args.size()))
                              .c_str());
    nb::object type = args.size() ? nb::borrow(args[0]) : nb::object(nb::str(default_type));
    if (fields.contains("scheduler_type")) {
        if (args.size())
            throw ParamsError(
                (std::string(what) + "() got scheduler_type twice").c_str());
        type = fields["scheduler_type"];
        nb::del(fields["scheduler_type"]);
    }
    auto name = scheduler_type_name(type, what);
    // A type that names its class must name this one, so that to_dict / from_dict gives back
    // the same class (HeuristicParams('pointwise') would come back as PointwiseParams).
    const char *owner = class_for_type(name);
    if (owner && std::string(owner) != what)
        throw ParamsError((std::string(what) + "(): scheduler_type '" + name + "' is a " +
                           owner + "'s; build a " + owner)
                              .c_str());
    return name;
}

template <class P>
void init_with_kwargs(P *self, nb::args args, nb::kwargs kwargs, const char *what,
                      const char *default_type) {
    nb::dict fields(kwargs);
    P tmp(scheduler_type_of(args, fields, what, default_type));
    reject_unknown(fields, field_names<P>(), what);
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
        // Arguments come as Python objects and are checked here (launch_from_dict), so that a
        // wrong type or name is a ParamsError naming the field, not nanobind's TypeError.
        .def(
            "__init__",
            [](LaunchParams *self, nb::args args, nb::kwargs kwargs) {
                reject_positional(args, "LaunchParams");
                new (self) LaunchParams(launch_from_dict(nb::dict(kwargs)));
            },
            nb::sig("def __init__(self, *, grid_x: int | None = None, grid_y: int | None = None, "
                    "grid_z: int | None = None, block_x: int | None = None, block_y: int | None "
                    "= None, block_z: int | None = None, shared_mem: int = 0) -> None"))
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
            [](CompileParams *self, nb::args args, nb::kwargs kwargs) {
                reject_positional(args, "CompileParams");
                new (self) CompileParams(compile_from_dict(nb::dict(kwargs)));
            },
            nb::sig("def __init__(self, *, index_type: str = 'int64', maxrregcount: int | None "
                    "= None, arch: str | None = None, extra_options: "
                    "collections.abc.Sequence[str] | None = None) -> None"))
        .def_prop_rw(
            "index_type", [](const CompileParams &p) { return p.index_type; },
            [](CompileParams &p, nb::handle value) {
                auto t = cast_field<std::string>(value, "CompileParams", "index_type");
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
        .def(
            "__init__",
            [](HeuristicParams *self, nb::args args, nb::kwargs kwargs) {
                nb::dict fields(kwargs);
                auto type = scheduler_type_of(args, fields, "HeuristicParams", "none");
                reject_unknown(fields, {}, "HeuristicParams");
                new (self) HeuristicParams(type);
            },
            nb::sig("def __init__(self, scheduler_type: kfuse.schedule.types.SchedulerType | str = "
                    "'none') -> None"))
        .def_prop_ro(
            "scheduler_type",
            [](const HeuristicParams &p) { return scheduler_type_enum()(p.scheduler_type()); },
            nb::for_getter(
                nb::sig("def scheduler_type(self) -> kfuse.schedule.types.SchedulerType")),
            "The scheduler these params are for, a kfuse.SchedulerType (read-only).")
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
    pointwise.def(
        "__init__",
        [](PointwiseParams *self, nb::args args, nb::kwargs kwargs) {
            init_with_kwargs(self, args, kwargs, "PointwiseParams", "pointwise");
        },
        nb::sig("def __init__(self, scheduler_type: kfuse.schedule.types.SchedulerType | str = "
                "'pointwise', **kwargs) -> None"));
    bind_fields<PointwiseParams>(pointwise, "PointwiseParams");

    auto reduction = nb::class_<ReductionParams, HeuristicParams>(
        m, "ReductionParams",
        "Reduction/normalization schedule: reduction layout (fastest_dim_reduction), "
        "persistence, block/grid shape, vectorize/unroll factors for the iteration and "
        "reduction domains, and cross-block / cross-grid flags. Keyword arguments set fields.");
    reduction.def(
        "__init__",
        [](ReductionParams *self, nb::args args, nb::kwargs kwargs) {
            init_with_kwargs(self, args, kwargs, "ReductionParams", "reduction");
        },
        nb::sig("def __init__(self, scheduler_type: kfuse.schedule.types.SchedulerType | str = "
                "'reduction', **kwargs) -> None"));
    bind_fields<ReductionParams>(reduction, "ReductionParams");
}

}  // namespace bindings
}  // namespace kfuse
