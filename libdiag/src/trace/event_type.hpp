// The HDF5 compound type of one /events row (schema::EventRow), used by writer and reader.
#pragma once
#include <string>

#include "h5.hpp"

namespace lpdiag::h5 {
Handle event_row_type(Failure kind, const std::string& file);
}
