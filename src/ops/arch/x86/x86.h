/* x86.h - the x86 kernel files' declarations for cpu.c, which picks them by
 * CPU feature. Functions in *_avx2.c are compiled with -mavx2 -mfma -mf16c,
 * those in *_vnni.c also with -mavx512f -mavx512vl -mavx512vnni, those in
 * *_avx512.c with -mavx512bw as well; they must
 * only be called after cpu.c has checked those features. */
#ifndef TKV_OPS_ARCH_X86_H
#define TKV_OPS_ARCH_X86_H

#include "ops/ops_impl.h"

void dequant_f16_avx2(const void *row, float *out, int64_t n);
void dequant_bf16_avx2(const void *row, float *out, int64_t n);
void dequant_q4_0_avx2(const void *row, float *out, int64_t n);
void dequant_q8_0_avx2(const void *row, float *out, int64_t n);
void dequant_q4_k_avx2(const void *row, float *out, int64_t n);
void dequant_q5_k_avx2(const void *row, float *out, int64_t n);
void dequant_q6_k_avx2(const void *row, float *out, int64_t n);

void quant_act_q8_32_avx2(const float *x, void *out, int64_t n);
void quant_act_q8_256_avx2(const float *x, void *out, int64_t n);
void quant_act_q8_1_avx2(const float *x, void *out, int64_t n);
void quant_act_q8_k32_avx2(const float *x, void *out, int64_t n);

void dot_rows_f32_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_f16_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_bf16_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q4_0_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q8_0_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q4_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q6_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);

void pack_q4_0_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q8_0_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q4_k_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q5_k_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q4_1_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q5_0_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_q5_1_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_iq4_nl_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void pack_iq4_xs_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void panel_u4_avx2(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q6_k_avx2(const void *w, size_t ws, int nr, int64_t n, void *panel);
void panel_k6_avx2(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void panel_u5_avx2(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void panel_s8_avx2(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q8_0_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q4_k_x8_avx2(const void *group, int64_t n, void *panel);
void gemv_q6_k_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q6_k_x8_avx2(const void *group, int64_t n, void *panel);
void gemv_q5_k_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q5_k_x8_avx2(const void *group, int64_t n, void *panel);
void gemv_q4_k_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);

/* quant_more_avx2.c */
void dot_rows_q4_1_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_0_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_1_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_iq4_nl_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q2_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q3_k_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_iq4_xs_avx2(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void gemv_q4_0_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q4_0_x8_avx2(const void *group, int64_t n, void *panel);
void gemv_q4_1_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q5_0_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q5_1_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_q4_1_x8_avx2(const void *group, int64_t n, void *panel);
void pack_q5_0_x8_avx2(const void *group, int64_t n, void *panel);
void pack_q5_1_x8_avx2(const void *group, int64_t n, void *panel);
void gemv_iq4_nl_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_iq4_xs_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void pack_iq4_nl_x8_avx2(const void *group, int64_t n, void *panel);
void pack_iq4_xs_x8_avx2(const void *group, int64_t n, void *panel);
void gemv_q2_k_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q3_k_x8_avx2(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);

void panel_u_vnni(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void panel_s8_vnni(int64_t n, const void *panel, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q4_0_x8_vnni(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q8_0_x8_vnni(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);

/* quant_avx512.c: 512-bit registers (AVX512F/BW/VL, AVX512-VNNI) */
void dot_rows_q4_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q6_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q3_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q2_k_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void gemv_q4_0_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q8_0_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q6_k_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q5_k_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q4_k_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q4_1_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q5_0_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q5_1_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_iq4_nl_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_iq4_xs_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q2_k_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
void gemv_q3_k_x8_avx512(int64_t n, const void *group, const void *a, size_t as, int nc, float *s, size_t ss);
/* quant_more_avx512.c */
void dot_rows_q4_1_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_0_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_q5_1_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_iq4_nl_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void dot_rows_iq4_xs_avx512(int64_t n, const void *w, size_t ws, int nr, const void *a, float *s);
void panel2_u_avx512(int64_t n, const void *panel, size_t pstride, const void *a, size_t as, int nc, float *s, size_t ss);
void panel2_s8_avx512(int64_t n, const void *panel, size_t pstride, const void *a, size_t as, int nc, float *s, size_t ss);
void panel2_k6_avx512(int64_t n, const void *panel, size_t pstride, const void *a, size_t as, int nc, float *s,
		      size_t ss);

#endif
