#pragma once
// A call's extra files (`sbx exec`'s and run_code's "files", beside /code/main.EXT and
// /in/input.json): one rule for both ways a call runs, checked when the request is parsed
// (exec.cpp, parse_exec_request), so that a cold and a pooled call accept and refuse the same
// requests; a pooled job (pool_job.cpp) is checked by it again, with room for the code and the
// input beside these files.
#include <cstddef>
#include <string_view>

namespace sbx {

inline constexpr std::size_t kMaxRequestFiles = 4096;
// A relative path of plain components: not empty, no leading or trailing '/', no empty, "." or
// ".." component (a cold sandbox's mount refuses them: mount_target.cpp), each at most NAME_MAX
// bytes, no NUL.
bool plain_relative_path(std::string_view rel);

}  // namespace sbx
