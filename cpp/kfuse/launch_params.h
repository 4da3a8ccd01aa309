// kfuse/launch_params.h: grid and block dimensions plus dynamic shared memory for one launch.
#pragma once

#include "params_error.h"

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace kfuse {

inline size_t hash_combine(size_t seed, size_t value) {
    return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

// A dimension left unset (std::nullopt) is 1 at launch, except that a launch needs grid_x and
// block_x from somewhere (the constraints given at compile time or at run time). Construction
// never queries a device; `validate_for_device` in kernel.cpp checks the device's limits.
struct LaunchParams {
    std::optional<int64_t> grid_x, grid_y, grid_z;
    std::optional<int64_t> block_x, block_y, block_z;
    int64_t shared_mem = 0;  // dynamic shared memory in bytes

    // Device-independent checks: dimensions >= 1 and shared memory >= 0.
    void validate() const {
        const std::optional<int64_t> *dims[6] = {&grid_x,  &grid_y,  &grid_z,
                                                 &block_x, &block_y, &block_z};
        const char *names[6] = {"grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"};
        for (int i = 0; i < 6; ++i)
            if (dims[i]->has_value() && **dims[i] < 1)
                throw ParamsError(std::string("LaunchParams.") + names[i] +
                                            " must be >= 1 or None, got " +
                                            std::to_string(**dims[i]));
        if (shared_mem < 0)
            throw ParamsError("LaunchParams.shared_mem must be >= 0, got " +
                                        std::to_string(shared_mem));
    }

    std::array<int64_t, 3> grid() const {
        return {grid_x.value_or(1), grid_y.value_or(1), grid_z.value_or(1)};
    }
    std::array<int64_t, 3> block() const {
        return {block_x.value_or(1), block_y.value_or(1), block_z.value_or(1)};
    }
    int64_t threads_per_block() const {
        auto b = block();
        return b[0] * b[1] * b[2];
    }

    // These parameters with every field that `over` sets replaced by its value.
    LaunchParams merged_with(const LaunchParams &over) const {
        LaunchParams r = *this;
        auto pick = [](std::optional<int64_t> &dst, const std::optional<int64_t> &src) {
            if (src)
                dst = src;
        };
        pick(r.grid_x, over.grid_x);
        pick(r.grid_y, over.grid_y);
        pick(r.grid_z, over.grid_z);
        pick(r.block_x, over.block_x);
        pick(r.block_y, over.block_y);
        pick(r.block_z, over.block_z);
        if (over.shared_mem != 0)
            r.shared_mem = over.shared_mem;
        return r;
    }

    bool operator==(const LaunchParams &o) const {
        return grid_x == o.grid_x && grid_y == o.grid_y && grid_z == o.grid_z &&
               block_x == o.block_x && block_y == o.block_y && block_z == o.block_z &&
               shared_mem == o.shared_mem;
    }
    bool operator!=(const LaunchParams &o) const { return !(*this == o); }

    size_t hash() const {
        size_t h = 0x4c61756e;
        for (const auto *d : {&grid_x, &grid_y, &grid_z, &block_x, &block_y, &block_z})
            h = hash_combine(h, d->has_value() ? std::hash<int64_t>()(**d) : 0x6e6f6e65);
        return hash_combine(h, std::hash<int64_t>()(shared_mem));
    }

    std::string repr() const {
        // The core builds strings without iostreams: an ostringstream-based repr segfaulted
        // in the GPU machine's build (GCC 13.3, cause not pinned down); plain strings did not.
        auto put = [](const char *name, const std::optional<int64_t> &v) {
            return std::string(name) + "=" + (v ? std::to_string(*v) : "None") + ", ";
        };
        return "LaunchParams(" + put("grid_x", grid_x) + put("grid_y", grid_y) +
               put("grid_z", grid_z) + put("block_x", block_x) + put("block_y", block_y) +
               put("block_z", block_z) + "shared_mem=" + std::to_string(shared_mem) + ")";
    }
};

}  // namespace kfuse
