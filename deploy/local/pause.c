/* The pod sandbox's pause process: sleeps, reaps orphans, exits on TERM/INT.
 * Built statically into the local pause image so nothing is ever pulled. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGTERM, &q, NULL);
  sigaction(SIGINT, &q, NULL);
  sigaction(SIGCHLD, &r, NULL);
  for (;;) pause();
  return 0;
}
