// det-trial --prestart: a trial-runtime process det-agent starts ahead of
// any allocation (agent/prestart_pool.h), with LibTorch loaded, waiting on
// its private channel (fd det::kPrestartChannelFd, a socket only the agent
// holds the other end of) for exactly one assignment
// (common/prestart_assignment.h). Once assigned it becomes what a fresh
// `det-trial --managed TRIAL` would have been, in the same order as a fresh
// launch: every other fd closed, the directory and umask, setgroups/setgid/
// setuid, PR_SET_PDEATHSIG (and still the child of its reaper), the
// assignment's environment in place of its own; then it acknowledges, and
// only then reads the allocation token (which the agent sends after the
// acknowledgement) and runs the allocation. It serves one trial and exits.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_PRESTART_MODE_H_
#define DET_TRIAL_RUNTIME_RUNTIME_PRESTART_MODE_H_

namespace det::runtime {

// Returns the process exit code: 0 when the agent closed the channel before
// assigning anything (the pool shrank or the agent stopped), 2 for a bad
// assignment or a failed step (told to the agent, which then launches a
// fresh process), else RunManagedWithToken's.
int RunPrestarted();

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_PRESTART_MODE_H_
