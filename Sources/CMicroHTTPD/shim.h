// CMicroHTTPD: GNU libmicrohttpd from libmicrohttpd-dev. Imported only by ShoalHTTP.
// MHD_start_daemon takes its options as C varargs, which Swift cannot pass: the one call is made
// here, with every option Shoal sets named.
#include <stdarg.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Where libmicrohttpd's own error messages go (formatted here; Swift cannot take a va_list).
typedef void (*shoal_mhd_log_fn)(void *cls, const char *message);

struct shoal_mhd_logger {
    shoal_mhd_log_fn fn;
    void *cls;
};

static void shoal_mhd_log_trampoline(void *cls, const char *fmt, va_list ap) {
    struct shoal_mhd_logger *logger = (struct shoal_mhd_logger *)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    if (logger && logger->fn) logger->fn(logger->cls, line);
}

/// The unescape callback that leaves the URL as it came: Shoal decodes the path's segments and
/// the query's values itself, so an id holding an encoded '/' stays one segment.
static size_t shoal_mhd_keep_escaped(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls; (void)c;
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

/// Starts a daemon on an already listening socket, with an internal epoll thread pool, suspend
/// and resume (for streams), and the limits Shoal sets.
static inline struct MHD_Daemon *shoal_mhd_start(
    int listen_fd, unsigned int threads,
    unsigned int connection_limit, unsigned int per_ip_limit,
    unsigned int timeout_seconds, size_t memory_limit,
    MHD_AccessHandlerCallback handler, void *handler_cls,
    MHD_RequestCompletedCallback completed, void *completed_cls,
    MHD_NotifyConnectionCallback notify, void *notify_cls,
    struct shoal_mhd_logger *logger)
{
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME
        | MHD_USE_ERROR_LOG;
    if (threads < 1) threads = 1;
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
        MHD_OPTION_EXTERNAL_LOGGER, shoal_mhd_log_trampoline, (void *)logger,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
        MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
        MHD_OPTION_UNESCAPE_CALLBACK, shoal_mhd_keep_escaped, NULL,
        MHD_OPTION_END);
}

/// The listening socket, back from a daemon that stops accepting (so it can be closed by the
/// caller after MHD_stop_daemon), or -1.
static inline int shoal_mhd_quiesce(struct MHD_Daemon *daemon) {
    return (int)MHD_quiesce_daemon(daemon);
}

/// The connection's socket (MHD_get_connection_info is variadic), or -1.
static inline int shoal_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? (int)info->connect_fd : -1;
}
