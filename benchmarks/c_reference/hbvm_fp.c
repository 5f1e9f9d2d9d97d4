/* Plain C reference of the HBVM(k,s) fixed-point step loop (docs/method.md 3), to measure the C limit on the
 * machine at hand: same warm start (extrapolation), same stopping rule, Kahan update, every point stored.
 * Build: cc -O2 -DTETHERED (or -DCONICAL) hbvm_fp.c -lm, optionally -O3 -march=native -DKK=6 -DSS=2 (k, s fixed).
 * Run: ./a.out k s h N tableau.txt
 * tableau.txt (written by benchmarks/step.py): Ihat (k*s), W (k*s), X (s*s), E (s*s), row-major.
 * Prints: us_per_step mean_iterations q_N[0]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(TETHERED)
#define M 9
#define NU 3
static void grad_U(int n, const double *Q, double *out) {
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 3; b++) {
            const double *x = Q + i * M + 3 * b;
            double r = sqrt(x[0] * x[0] + x[1] * x[1] + x[2] * x[2]), r3 = r * r * r;
            for (int c = 0; c < 3; c++) out[i * M + 3 * b + c] = x[c] / r3;
        }
}
static void G(int n, const double *Q, double *out) {
    for (int i = 0; i < n; i++) {
        double *o = out + i * M * NU;
        memset(o, 0, sizeof(double) * M * NU);
        for (int c = 0; c < 3; c++) {
            int bi = c, bj = (c + 1) % 3;
            for (int x = 0; x < 3; x++) {
                double d = 2.0 * (Q[i * M + 3 * bi + x] - Q[i * M + 3 * bj + x]);
                o[(3 * bi + x) * NU + c] = d;
                o[(3 * bj + x) * NU + c] = -d;
            }
        }
    }
}
static const double q_init[M] = {0, 0.5, 20, 0, -0.5, 20, 0, 0, 20 - 0.8660254037844386};
static const double p_init[M] = {0, 0, 0, 0, 0, 0, 0.5517822421601886, 0, 0};
#else
#define M 3
#define NU 1
static void grad_U(int n, const double *Q, double *out) {
    for (int i = 0; i < n; i++) { out[i * M] = 0; out[i * M + 1] = 0; out[i * M + 2] = 1; }
}
static void G(int n, const double *Q, double *out) {
    for (int i = 0; i < n * M; i++) out[i] = 2.0 * Q[i];
}
static const double q_init[M] = {0.7071067811865476, 0, -0.7071067811865476};
static const double p_init[M] = {0, 0.8408964152537145, 0};
#endif

#define KMAX 16
#define SMAX 16

int main(int argc, char **argv) {
#ifdef KK /* k and s fixed at compile time (cc -DKK=2 -DSS=2): the loops over them unroll too */
    const int k = KK, s = SS;
    if (atoi(argv[1]) != k || atoi(argv[2]) != s) return 3;
#else
    int k = atoi(argv[1]), s = atoi(argv[2]);
#endif
    double h = atof(argv[3]);
    long N = atol(argv[4]);
    double Ihat[KMAX * SMAX], W[KMAX * SMAX], X[SMAX * SMAX], E[SMAX * SMAX];
    FILE *f = fopen(argv[5], "r");
    for (int i = 0; i < k * s; i++) if (fscanf(f, "%lf", &Ihat[i]) != 1) return 2;
    for (int i = 0; i < k * s; i++) if (fscanf(f, "%lf", &W[i]) != 1) return 2;
    for (int i = 0; i < s * s; i++) if (fscanf(f, "%lf", &X[i]) != 1) return 2;
    for (int i = 0; i < s * s; i++) if (fscanf(f, "%lf", &E[i]) != 1) return 2;
    fclose(f);
    const double eps = 2.220446049250313e-16, rtol = 4 * eps, stall = 1000 * eps;
    double q[M], p[M], cq[M] = {0}, cp[M] = {0};
    memcpy(q, q_init, sizeof q); memcpy(p, p_init, sizeof p);
    double gamma[SMAX][M], gprev[SMAX][M], nw[SMAX][M], Q[KMAX * M], gU[KMAX * M], GQ[KMAX * M * NU];
    double psi[SMAX][M], rho[SMAX][M][NU], Xpsi[SMAX][M], Xrho[SMAX][M][NU], A[NU][NU], lam[NU];
    double *out = malloc(sizeof(double) * 2 * M * (N + 1));
    long total = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    for (long n = 0; n < N; n++) {
        if (n == 0) { memset(gamma, 0, sizeof gamma); for (int a = 0; a < M; a++) gamma[0][a] = p[a]; }
        else for (int j = 0; j < s; j++) for (int a = 0; a < M; a++) {
            double acc = 0; for (int i = 0; i < s; i++) acc += E[j * s + i] * gprev[i][a]; gamma[j][a] = acc; }
        double dprev = INFINITY; int it;
        for (it = 1; it <= 100; it++) {
            for (int i = 0; i < k; i++) for (int a = 0; a < M; a++) {
                double acc = 0; for (int j = 0; j < s; j++) acc += Ihat[i * s + j] * gamma[j][a];
                Q[i * M + a] = q[a] + h * acc; }
            grad_U(k, Q, gU); G(k, Q, GQ);
            for (int j = 0; j < s; j++) for (int a = 0; a < M; a++) {
                double acc = 0; for (int i = 0; i < k; i++) acc += W[i * s + j] * gU[i * M + a]; psi[j][a] = acc;
                for (int r = 0; r < NU; r++) { acc = 0; for (int i = 0; i < k; i++) acc += W[i * s + j] * GQ[(i * M + a) * NU + r]; rho[j][a][r] = acc; } }
            for (int j = 0; j < s; j++) for (int a = 0; a < M; a++) {
                double acc = 0; for (int l = 0; l < s; l++) acc += X[j * s + l] * psi[l][a]; Xpsi[j][a] = acc;
                for (int r = 0; r < NU; r++) { acc = 0; for (int l = 0; l < s; l++) acc += X[j * s + l] * rho[l][a][r]; Xrho[j][a][r] = acc; } }
            for (int r = 0; r < NU; r++) {
                for (int c = 0; c < NU; c++) { double acc = 0;
                    for (int j = 0; j < s; j++) for (int a = 0; a < M; a++) acc += rho[j][a][r] * Xrho[j][a][c];
                    A[r][c] = h * acc; }
                double a0 = 0, acc = 0;
                for (int a = 0; a < M; a++) a0 += rho[0][a][r] * p[a];
                for (int j = 0; j < s; j++) for (int a = 0; a < M; a++) acc += rho[j][a][r] * Xpsi[j][a];
                lam[r] = a0 - h * acc; }
            for (int c = 0; c < NU; c++) {  /* Gaussian elimination, partial pivoting */
                int pr = c; for (int r = c + 1; r < NU; r++) if (fabs(A[r][c]) > fabs(A[pr][c])) pr = r;
                if (pr != c) { for (int j = 0; j < NU; j++) { double t = A[c][j]; A[c][j] = A[pr][j]; A[pr][j] = t; }
                    double t = lam[c]; lam[c] = lam[pr]; lam[pr] = t; }
                for (int r = c + 1; r < NU; r++) { double fct = A[r][c] / A[c][c];
                    for (int j = c + 1; j < NU; j++) A[r][j] -= fct * A[c][j]; lam[r] -= fct * lam[c]; } }
            for (int r = NU - 1; r >= 0; r--) { double acc = lam[r]; for (int j = r + 1; j < NU; j++) acc -= A[r][j] * lam[j]; lam[r] = acc / A[r][r]; }
            double d = 0, scale = 1;
            for (int j = 0; j < s; j++) for (int a = 0; a < M; a++) {
                double v = -h * Xpsi[j][a];
                if (j == 0) v += p[a];
                double acc = 0; for (int r = 0; r < NU; r++) acc += Xrho[j][a][r] * lam[r];
                v -= h * acc; nw[j][a] = v;
                d = fmax(d, fabs(v - gamma[j][a])); scale = fmax(scale, fabs(v)); }
            memcpy(gamma, nw, sizeof gamma);
            if (d <= rtol * scale || (d <= stall * scale && d >= dprev)) break;
            dprev = d;
        }
        total += it;
        memcpy(gprev, gamma, sizeof gamma);
        for (int a = 0; a < M; a++) {
            double force = psi[0][a]; for (int r = 0; r < NU; r++) force += rho[0][a][r] * lam[r];
            double y = h * gamma[0][a] - cq[a], z = q[a] + y; cq[a] = (z - q[a]) - y; q[a] = z;
            y = -h * force - cp[a]; z = p[a] + y; cp[a] = (z - p[a]) - y; p[a] = z;
            out[(n + 1) * 2 * M + a] = q[a]; out[(n + 1) * 2 * M + M + a] = p[a]; }
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double w = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("%.4f %.4f %.17g\n", w / N * 1e6, (double)total / N, out[N * 2 * M]);
    free(out);
    return 0;
}
