#include "runtime/base/poll_set.hpp"

namespace sbx {

PollRound::PollRound(const PollParticipants& participants) : parts_(participants) {
  set_.fds().reserve(16);
  first_.reserve(parts_.size() + 1);
  for (const auto& p : parts_) {
    first_.push_back(set_.fds().size());
    p->add_to(set_);
  }
  first_.push_back(set_.fds().size());
}

std::span<const struct pollfd> PollRound::entries(std::size_t i) const {
  return std::span<const struct pollfd>(set_.fds()).subspan(first_[i], first_[i + 1] - first_[i]);
}

std::span<const struct pollfd> PollRound::entries_of(const PollParticipant& p) const {
  for (std::size_t i = 0; i < parts_.size(); ++i)
    if (parts_[i].get() == &p) return entries(i);
  return {};
}

int PollRound::wait(int timeout_ms) {
  return ::poll(set_.fds().data(), static_cast<nfds_t>(set_.fds().size()), timeout_ms);
}

void PollRound::dispatch() {
  for (std::size_t i = 0; i < parts_.size(); ++i) parts_[i]->dispatch(entries(i));
}

}  // namespace sbx
