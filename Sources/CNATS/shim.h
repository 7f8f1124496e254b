// CNATS: the official NATS C client from libnats-dev (3.4, with JetStream). Imported only by
// ShoalUplink. Nothing to wrap: every call Shoal makes takes fixed arguments.
#include <stdbool.h>
#include <nats/nats.h>
