// The launcher's lifeline: a rank notices that the launcher that started it is gone.
//
// The launcher (launcher.h) gives every rank a pipe as stdin whose write end only it holds
// and never writes, and sets LATTICE_LIFELINE=stdin. When the launcher ends in any way
// (SIGKILL included) the pipe closes; through a remote command (`ssh {ssh} {cmd}`) the remote
// stdin closes with the ssh session, and through `ip netns exec` it is the same pipe. A rank
// watching its lifeline then stops by itself: exit code 1 and a line on stderr saying so. This
// is what reaches ranks that PR_SET_PDEATHSIG and the launcher's process-group signals cannot
// (another host, a grandchild, a process the launcher never got to signal).
#pragma once

namespace lattice::cluster {

// If LATTICE_LIFELINE=stdin and stdin is a pipe or a socket: starts a detached thread that
// waits (asleep in poll) for it to close, then ends the process. Idempotent; no-op otherwise.
void watch_lifeline_from_env();

}  // namespace lattice::cluster
