// kfuse/params_error.h: the one exception params raise for a bad value or a value of the
// wrong type; Python sees kfuse._C.ParamsError, a KfuseError that is also a ValueError and a
// TypeError (so code that catches either, as Python's conventions suggest, still works).
#pragma once

#include <stdexcept>
#include <string>

namespace kfuse {

class ParamsError : public std::invalid_argument {
public:
    explicit ParamsError(const std::string &what) : std::invalid_argument(what) {}
};

}  // namespace kfuse
