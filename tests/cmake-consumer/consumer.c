/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_cmake_package.sh: a program built by CMake against the
 * installed package. Prints libapexx's version, the name of a status (a
 * call into the library) and the file the library was loaded from. */
#define _GNU_SOURCE
#include <apexx/apexx.h>
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
  Dl_info where;
  if (!dladdr((void *)apx_version, &where) || !where.dli_fname) {
    fprintf(stderr, "consumer: dladdr names no file for apx_version\n");
    return 1;
  }
  printf("version %s\nstatus %s\nlibrary %s\n", apx_version(), apx_status_name(APX_OK),
         where.dli_fname);
  return 0;
}
