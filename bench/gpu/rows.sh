# SPDX-License-Identifier: Apache-2.0
# apexx-bench's cuda rows by kind, for the GPU scripts' --ops (sourced by
# run-all.sh and ab-build.sh): at the large profile one process makes every
# row's inputs before it times any (tens of seconds of host work; the
# backward rows' gradients double the tensors), so the scripts time the two
# kinds in processes of their own.
bw_forward=reference,tilepack,tileunpack_override,tileunpack_blend,fused_pack_op_unpack
bw_forward=$bw_forward,fusiongate_alpha,fusiongate_fuse,tilessm_forward,tilessm_bidirectional
bw_forward=$bw_forward,gather,index_select,scatter_add,gather_backward
bw_backward=reference,tilepack_backward,tileunpack_backward_override,tileunpack_backward_blend
bw_backward=$bw_backward,fused_pack_op_unpack_backward,fusiongate_alpha_backward
bw_backward=$bw_backward,fusiongate_fuse_backward,tilessm_scan_backward_forward
bw_backward=$bw_backward,tilessm_scan_backward_bidirectional,index_select_backward
