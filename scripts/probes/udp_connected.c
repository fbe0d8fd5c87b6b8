/*
 * scripts/probes/udp_connected.c — a measurement probe (not part of the data path): what a
 * datagram costs through an unconnected socket (sendto, which looks the route up each time)
 * against a connected one (send), over loopback. The UDP wire (link/src/udp.rs) sends through
 * connected sockets because of it; the UDP floor (operator/src/bench/floors.rs) always did.
 *
 * Build and run (any Linux machine; two spinning threads):
 *   gcc -O2 -o /tmp/udp_connected scripts/probes/udp_connected.c -lpthread
 *   /tmp/udp_connected MODE [initiator_core responder_core]
 * MODE 0: sendto + recvfrom on unconnected sockets; 1: send + recv on connected sockets;
 * 2: send on connected sockets, recvfrom. Prints the round trip's p50 and p99 (ns) over
 * 200000 round trips of an 80-byte datagram between 127.0.0.5 and 127.0.0.6.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define ROUND_TRIPS 200000
#define DATAGRAM 80

static int mode, core_a, core_b, sock_a, sock_b;
static struct sockaddr_in addr_a, addr_b;
static volatile int stop;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void pin(int core) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(core, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static int rx(int s, char *b) {
    if (mode == 1) return (int)recv(s, b, 2048, MSG_DONTWAIT);
    struct sockaddr_in from;
    socklen_t len = sizeof from;
    return (int)recvfrom(s, b, 2048, MSG_DONTWAIT, (struct sockaddr *)&from, &len);
}

static void tx(int s, const char *b, int n, const struct sockaddr_in *to) {
    if (mode == 0)
        sendto(s, b, n, 0, (const struct sockaddr *)to, sizeof *to);
    else
        send(s, b, n, 0);
}

static void *responder(void *arg) {
    (void)arg;
    pin(core_b);
    char b[2048];
    while (!stop) {
        int n = rx(sock_b, b);
        if (n > 0) tx(sock_b, b, n, &addr_a);
    }
    return 0;
}

static int cmp(const void *x, const void *y) {
    long a = *(const long *)x, b = *(const long *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODE(0|1|2) [initiator_core responder_core]\n", argv[0]);
        return 2;
    }
    mode = atoi(argv[1]);
    core_a = argc > 2 ? atoi(argv[2]) : 0;
    core_b = argc > 3 ? atoi(argv[3]) : 1;
    sock_a = socket(AF_INET, SOCK_DGRAM, 0);
    sock_b = socket(AF_INET, SOCK_DGRAM, 0);
    addr_a.sin_family = addr_b.sin_family = AF_INET;
    addr_a.sin_addr.s_addr = inet_addr("127.0.0.5");
    addr_b.sin_addr.s_addr = inet_addr("127.0.0.6");
    addr_a.sin_port = htons(40001);
    addr_b.sin_port = htons(40002);
    if (bind(sock_a, (struct sockaddr *)&addr_a, sizeof addr_a) || bind(sock_b, (struct sockaddr *)&addr_b, sizeof addr_b)) {
        perror("bind");
        return 1;
    }
    if (mode != 0 && (connect(sock_a, (struct sockaddr *)&addr_b, sizeof addr_b) || connect(sock_b, (struct sockaddr *)&addr_a, sizeof addr_a))) {
        perror("connect");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, 0, responder, 0);
    pin(core_a);
    char b[2048] = {0};
    long *rtt = malloc(sizeof(long) * ROUND_TRIPS);
    for (int i = 0; i < ROUND_TRIPS; i++) {
        long t0 = now_ns();
        tx(sock_a, b, DATAGRAM, &addr_b);
        while (rx(sock_a, b) <= 0) {
        }
        rtt[i] = now_ns() - t0;
    }
    stop = 1;
    pthread_join(t, 0);
    qsort(rtt, ROUND_TRIPS, sizeof(long), cmp);
    printf("mode %s p50 %ld p99 %ld\n", mode == 1 ? "connected" : mode == 2 ? "conn-send,recvfrom" : "sendto", rtt[ROUND_TRIPS / 2],
           rtt[ROUND_TRIPS * 99 / 100]);
    return 0;
}
