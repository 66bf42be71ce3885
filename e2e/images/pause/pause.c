/* The pod sandbox ("pause") process of the e2e cluster (e2e/cluster.sh).
 *
 * It only has to exist: the pod's namespaces live as long as it does. It is
 * PID 1 of the pod when the PID namespace is shared, so it reaps orphaned
 * children, and it exits at once on SIGTERM or SIGINT (PID 1 gets no default
 * signal handling, so without handlers the runtime would have to SIGKILL it).
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;)
        pause();
}
