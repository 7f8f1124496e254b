// CMosquitto: the Eclipse Mosquitto client library from libmosquitto-dev (2.0). Imported only by
// ShoalMQTT. Nothing to wrap: every call Shoal makes takes fixed arguments.
#include <stdbool.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
