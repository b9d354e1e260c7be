// File: server/service_manager.h
//
// Telling systemd (or any service manager that speaks its notify protocol)
// where ipupodd stands: the unit is Type=notify (deploy/ipupodd.service), so
// `systemctl start` returns when the state is restored and the listeners
// serve, not when the process merely exists.
//
//   NotifyReady      READY=1 with a STATUS= line ("serving POD16 on ...")
//   NotifyReloading  RELOADING=1 (SIGHUP received; READY=1 follows)
//   NotifyStopping   STOPPING=1 (SIGTERM/SIGINT received; shutting down)
//   NotifyStatus     STATUS= only (a free-form line `systemctl status` shows)
//
// Each is a datagram to $NOTIFY_SOCKET through libsystemd's sd_notify; with
// the variable unset (not under systemd) each does nothing. A notification
// that cannot be sent is logged at warn and otherwise ignored: the server's
// work never depends on its manager listening.
//
// Thread safety: safe from any thread (sd_notify keeps no state).
#ifndef IPUPOD_SERVER_SERVICE_MANAGER_H_
#define IPUPOD_SERVER_SERVICE_MANAGER_H_

#include "absl/strings/string_view.h"

namespace ipupod::server {

void NotifyReady(absl::string_view status);
void NotifyReloading();
void NotifyStopping();
void NotifyStatus(absl::string_view status);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SERVICE_MANAGER_H_
