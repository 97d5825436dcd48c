#include "runtime/typed_io.hpp"

namespace sbx {

nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256) {
  return {{"path", path}, {"bytes", bytes}, {"sha256", sha256}};
}

}  // namespace sbx
