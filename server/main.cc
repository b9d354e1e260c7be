// ipupodd: everything is in server/daemon.h (RunDaemon), so tests can reach it.
#include "server/daemon.h"

int main(int argc, char** argv) { return ipupod::server::RunDaemon(argc, argv); }
