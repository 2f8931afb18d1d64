/* SPDX-License-Identifier: Apache-2.0 */
/* Plain reference loops for the TileSSM scan (docs/ops.md, tilessm_scan) and the
 * indexing ops (10.1-10.4), written per element straight from the spec and
 * independent of any backend's code. They read and write host tensors
 * described by the same args structs as the public API, and assume valid
 * arguments. The test suites compare backends with them bit for bit. */
#ifndef APX_REF_SCAN_INDEX_H
#define APX_REF_SCAN_INDEX_H

#include <apexx/apexx.h>

/* Writes args->out and, when given, args->final_state. */
void ref_tilessm_scan(const apx_tilessm_scan_args *args);
void ref_gather(const apx_gather_args *args);
void ref_index_select(const apx_index_select_args *args);
/* out = self, then += src for every index position in ascending linear
 * order; floats accumulate in fp32 and round once, integers wrap. out may
 * be self. */
void ref_scatter_add(const apx_scatter_add_args *args);
void ref_gather_backward(const apx_gather_backward_args *args);

#endif
