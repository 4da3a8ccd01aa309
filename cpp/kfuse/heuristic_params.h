// kfuse/heuristic_params.h: what a scheduler decided, as plain structs with one field table each.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "compile_params.h"
#include "launch_params.h"

namespace kfuse {

// One named member of a params struct. Each struct lists its fields once, in `fields()`;
// the bindings (read-write attributes), repr, ==, hash and to_dict all come from that list.
template <class C, class T>
struct Field {
    const char *name;
    T C::*member;
};
template <class C, class T>
constexpr Field<C, T> field(const char *name, T C::*member) {
    return {name, member};
}

using FieldValue = std::variant<bool, int64_t>;
using FieldValues = std::vector<std::pair<const char *, FieldValue>>;

class HeuristicParams {
public:
    LaunchParams lparams;
    CompileParams cparams;

    explicit HeuristicParams(std::string scheduler_type = "none")
        : scheduler_type_(std::move(scheduler_type)) {}
    virtual ~HeuristicParams() = default;

    const std::string &scheduler_type() const { return scheduler_type_; }

    // The subclass's own fields, in declaration order (the base has none).
    virtual FieldValues field_values() const { return {}; }
    virtual const char *class_name() const { return "HeuristicParams"; }
    virtual std::unique_ptr<HeuristicParams> clone() const {
        return std::make_unique<HeuristicParams>(*this);
    }

    bool operator==(const HeuristicParams &o) const {
        return std::string(class_name()) == o.class_name() &&
               scheduler_type_ == o.scheduler_type_ && lparams == o.lparams &&
               cparams == o.cparams && field_values() == o.field_values();
    }
    bool operator!=(const HeuristicParams &o) const { return !(*this == o); }

    size_t hash() const {
        size_t h = hash_combine(std::hash<std::string>()(scheduler_type_), lparams.hash());
        h = hash_combine(h, cparams.hash());
        for (const auto &f : field_values())
            h = hash_combine(h, std::visit([](auto v) { return std::hash<int64_t>()(int64_t(v)); },
                                           f.second));
        return h;
    }

    std::string repr() const {
        // As Python shows the scheduler_type property: a kfuse.SchedulerType.
        std::string r =
            std::string(class_name()) + "(scheduler_type=SchedulerType." + scheduler_type_;
        for (const auto &f : field_values()) {
            r += std::string(", ") + f.first + "=";
            if (auto b = std::get_if<bool>(&f.second))
                r += *b ? "True" : "False";
            else
                r += std::to_string(std::get<int64_t>(f.second));
        }
        return r + ", lparams=" + lparams.repr() + ", cparams=" + cparams.repr() + ")";
    }

protected:
    template <class C, class Tuple>
    static FieldValues values_of(const C &self, const Tuple &fields) {
        FieldValues out;
        std::apply([&](const auto &...f) { (out.emplace_back(f.name, FieldValue(self.*(f.member))), ...); },
                   fields);
        return out;
    }

private:
    std::string scheduler_type_;
};

// Pointwise scheduler: a 1-D or 2-D (split at break_point) tiling of the output.
class PointwiseParams : public HeuristicParams {
public:
    int64_t vectorization_factor = 1;
    int64_t unroll_factor = 1;  // vectors a thread takes along a row
    // 2-D schedule: consecutive rows a thread takes, its inputs that are the same along them
    // (a stride of 0 along the rows' innermost axis) loaded once for all of them
    int64_t unroll_factor_outer = 1;
    int64_t break_point = -1;  // -1: 1-D schedule; else axes [0, bp) map to y, [bp, n) to x
    int64_t block_x = 128;
    int64_t block_y = 1;
    int64_t grid_x = 1;
    int64_t grid_y = 1;
    bool split_grid_y = false;  // grid_y exceeds the device limit: loop over it in the kernel

    explicit PointwiseParams(std::string scheduler_type = "pointwise")
        : HeuristicParams(std::move(scheduler_type)) {}

    static constexpr auto fields() {
        using P = PointwiseParams;
        return std::make_tuple(
            field("vectorization_factor", &P::vectorization_factor),
            field("unroll_factor", &P::unroll_factor),
            field("unroll_factor_outer", &P::unroll_factor_outer),
            field("break_point", &P::break_point),
            field("block_x", &P::block_x), field("block_y", &P::block_y),
            field("grid_x", &P::grid_x), field("grid_y", &P::grid_y),
            field("split_grid_y", &P::split_grid_y));
    }
    FieldValues field_values() const override { return values_of(*this, fields()); }
    const char *class_name() const override { return "PointwiseParams"; }
    std::unique_ptr<HeuristicParams> clone() const override {
        return std::make_unique<PointwiseParams>(*this);
    }
};

// Reduction and normalization schedulers. "iter" is the kept (iteration) domain, "reduction"
// the reduced one; factors are 1 when off.
class ReductionParams : public HeuristicParams {
public:
    bool fastest_dim_reduction = true;  // the reduced axes are the innermost (inner reduction)
    bool persistent = false;            // the reduction dim lives in registers/smem
    int64_t persistent_batch_size = 1;  // elements of the reduction dim each thread holds
    bool smem_persistent = false;       // persistent: the held row lives in shared memory
    // persistent: of the persistent_batch_size vectors per thread, the last reload_batch_size
    // are not held but read again from global memory (served by L2) on every pass over the row
    int64_t reload_batch_size = 0;
    // persistent: blocks of a thread-block cluster (sm_90+) that share one row, each holding
    // its own part and combining the reductions through distributed shared memory; 1: none
    int64_t cluster_size = 1;
    int64_t block_x = 1;
    int64_t block_y = 1;
    int64_t grid_x = 1;
    int64_t grid_y = 1;
    int64_t vectorize_iter = 1;         // vector width along the iteration domain
    int64_t vectorize_reduction = 1;    // vector width along the reduction domain
    int64_t unroll_iter = 1;
    int64_t unroll_reduction = 1;
    bool reduction_unroll = false;      // unrolling applies to the reduction dim first
    bool cross_block_inner_reduction = false;  // threads of a block share an inner reduction
    bool cross_block_outer_reduction = false;  // threads of a block share an outer reduction
    bool cross_block = false;           // grid reduction: blocks cooperate on one reduction
    int64_t cross_grid_count = 1;       // blocks per reduction in a grid reduction
    bool split_grid_dim_iter = false;   // iteration grid exceeds a device limit: loop over it

    explicit ReductionParams(std::string scheduler_type = "reduction")
        : HeuristicParams(std::move(scheduler_type)) {}

    static constexpr auto fields() {
        using P = ReductionParams;
        return std::make_tuple(
            field("fastest_dim_reduction", &P::fastest_dim_reduction),
            field("persistent", &P::persistent),
            field("persistent_batch_size", &P::persistent_batch_size),
            field("smem_persistent", &P::smem_persistent),
            field("reload_batch_size", &P::reload_batch_size),
            field("cluster_size", &P::cluster_size),
            field("block_x", &P::block_x), field("block_y", &P::block_y),
            field("grid_x", &P::grid_x), field("grid_y", &P::grid_y),
            field("vectorize_iter", &P::vectorize_iter),
            field("vectorize_reduction", &P::vectorize_reduction),
            field("unroll_iter", &P::unroll_iter), field("unroll_reduction", &P::unroll_reduction),
            field("reduction_unroll", &P::reduction_unroll),
            field("cross_block_inner_reduction", &P::cross_block_inner_reduction),
            field("cross_block_outer_reduction", &P::cross_block_outer_reduction),
            field("cross_block", &P::cross_block),
            field("cross_grid_count", &P::cross_grid_count),
            field("split_grid_dim_iter", &P::split_grid_dim_iter));
    }
    FieldValues field_values() const override { return values_of(*this, fields()); }
    const char *class_name() const override { return "ReductionParams"; }
    std::unique_ptr<HeuristicParams> clone() const override {
        return std::make_unique<ReductionParams>(*this);
    }
};

}  // namespace kfuse
