/* libdemo: the C half of epbuild's offline demo recipe. */
#include "demo.h"

#define DEMO_API __attribute__((visibility("default")))

DEMO_API const char *demo_version(void) { return "1.0.0"; }

DEMO_API int demo_channels(void) { return 4; }
