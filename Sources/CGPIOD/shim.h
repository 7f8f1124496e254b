// CGPIOD: libgpiod 1.6 (the v1 API) from libgpiod-dev. Imported only by ShoalLinux.
#include <gpiod.h>
