// kfuse/compile_params.h: how a kernel is compiled (index type, registers, arch, NVRTC flags).
#pragma once

#include "params_error.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch_params.h"

namespace kfuse {

struct CompileParams {
    std::string index_type = "int64";       // "int32" or "int64": the kernel's Index type
    std::optional<int64_t> maxrregcount;    // --maxrregcount, None: NVRTC decides
    std::optional<std::string> arch;        // "sm_90" etc.; None: the device's own
    std::vector<std::string> extra_options; // passed to NVRTC after kfuse's own options

    static void check_index_type(const std::string &t) {
        if (t != "int32" && t != "int64")
            throw ParamsError(
                "CompileParams.index_type must be 'int32' or 'int64', got '" + t + "'");
    }

    void validate() const {
        check_index_type(index_type);
        if (maxrregcount && (*maxrregcount < 16 || *maxrregcount > 255))
            throw ParamsError("CompileParams.maxrregcount must be in [16, 255] or "
                                        "None, got " + std::to_string(*maxrregcount));
        if (arch && arch->rfind("sm_", 0) != 0)
            throw ParamsError("CompileParams.arch must look like 'sm_90' or be None, "
                                        "got '" + *arch + "'");
    }

    // The NVRTC options these parameters imply (the architecture is passed separately).
    std::vector<std::string> nvrtc_options() const {
        std::vector<std::string> opts;
        if (maxrregcount)
            opts.push_back("--maxrregcount=" + std::to_string(*maxrregcount));
        opts.insert(opts.end(), extra_options.begin(), extra_options.end());
        return opts;
    }

    bool operator==(const CompileParams &o) const {
        return index_type == o.index_type && maxrregcount == o.maxrregcount && arch == o.arch &&
               extra_options == o.extra_options;
    }
    bool operator!=(const CompileParams &o) const { return !(*this == o); }

    size_t hash() const {
        std::hash<std::string> hs;
        size_t h = hash_combine(0x436f6d70, hs(index_type));
        h = hash_combine(h, maxrregcount ? std::hash<int64_t>()(*maxrregcount) : 0x6e6f6e65);
        h = hash_combine(h, arch ? hs(*arch) : 0x6e6f6e65);
        for (const auto &o : extra_options)
            h = hash_combine(h, hs(o));
        return h;
    }

    std::string repr() const {
        std::string r = "CompileParams(index_type='" + index_type + "', maxrregcount=" +
                        (maxrregcount ? std::to_string(*maxrregcount) : "None") +
                        ", arch=" + (arch ? "'" + *arch + "'" : std::string("None")) +
                        ", extra_options=[";
        for (size_t i = 0; i < extra_options.size(); ++i)
            r += (i ? ", '" : "'") + extra_options[i] + "'";
        return r + "])";
    }
};

}  // namespace kfuse
