#pragma once
// One interface for everything a poll loop waits on (the supervisor's, runtime/launch/supervisor.cpp):
// a participant adds its entries for the coming pass to a PollSet, and after poll() it is handed
// back exactly those entries with what poll() reported. A PollRound is one pass: every participant
// registers, in the order given, one poll(), then every participant is dispatched in that same
// order, so the order of the list is the order in which one pass handles what is ready.
#include <poll.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace sbx {

// The pollfd array of one pass.
class PollSet {
 public:
  // One entry. An fd < 0 is an entry too, which poll() ignores (its revents are 0): a participant's
  // entries keep their places whether or not each of its fds is polled this pass.
  void add(int fd, short events = POLLIN) { fds_.push_back({fd, events, 0}); }
  // For a participant that appends its own entries (EgressProxy::add_pollfds, CgroupEvents).
  std::vector<struct pollfd>& fds() { return fds_; }
  const std::vector<struct pollfd>& fds() const { return fds_; }

 private:
  std::vector<struct pollfd> fds_;
};

// poll() reported data, EOF or an error: each ends the wait of a reader.
inline bool poll_readable(short revents) { return (revents & (POLLIN | POLLHUP | POLLERR)) != 0; }

class PollParticipant {
 public:
  virtual ~PollParticipant() = default;
  // This pass's entries: none, or fds < 0, when it waits on nothing now.
  virtual void add_to(PollSet& set) = 0;
  // After poll(): its own entries as it added them, with their revents. Called every pass, also
  // when nothing of it is ready (or it added nothing): a participant may have work each pass.
  virtual void dispatch(std::span<const struct pollfd> mine) = 0;
};

using PollParticipants = std::vector<std::unique_ptr<PollParticipant>>;

// One pass over `participants` (which outlive it).
class PollRound {
 public:
  explicit PollRound(const PollParticipants& participants);
  // The entries `p` added this pass (empty: none; also for a participant not in the list).
  std::span<const struct pollfd> entries_of(const PollParticipant& p) const;
  // poll() over every entry: its result (-1 with errno on failure, EINTR included).
  int wait(int timeout_ms);
  // Each participant with its own entries, in the list's order.
  void dispatch();

 private:
  std::span<const struct pollfd> entries(std::size_t i) const;

  const PollParticipants& parts_;
  PollSet set_;
  std::vector<std::size_t> first_;  // participant i's entries: [first_[i], first_[i + 1])
};

// A participant of one fd (< 0: not polled this pass), handled when poll_readable.
class PollFd final : public PollParticipant {
 public:
  PollFd(std::function<int()> fd, std::function<void(short revents)> on_ready)
      : fd_(std::move(fd)), on_ready_(std::move(on_ready)) {}
  void add_to(PollSet& set) override { set.add(fd_()); }
  void dispatch(std::span<const struct pollfd> mine) override {
    if (!mine.empty() && poll_readable(mine[0].revents)) on_ready_(mine[0].revents);
  }

 private:
  std::function<int()> fd_;
  std::function<void(short)> on_ready_;
};

// A participant of any entries, from its two halves.
class PollHooks final : public PollParticipant {
 public:
  PollHooks(std::function<void(PollSet&)> add, std::function<void(std::span<const struct pollfd>)> dispatch)
      : add_(std::move(add)), dispatch_(std::move(dispatch)) {}
  void add_to(PollSet& set) override { add_(set); }
  void dispatch(std::span<const struct pollfd> mine) override { dispatch_(mine); }

 private:
  std::function<void(PollSet&)> add_;
  std::function<void(std::span<const struct pollfd>)> dispatch_;
};

}  // namespace sbx
