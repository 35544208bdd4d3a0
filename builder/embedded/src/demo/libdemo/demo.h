/* libdemo: the C half of epbuild's offline demo recipe. */
#ifndef LIBDEMO_DEMO_H
#define LIBDEMO_DEMO_H

/* The library's version string. */
const char *demo_version(void);

/* How many channels the library offers. */
int demo_channels(void);

#endif
