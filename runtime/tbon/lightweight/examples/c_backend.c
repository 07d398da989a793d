/* A lightweight back-end in C, in the style of MRNet's Appendix B.3: it joins a leaf of an
 * attach-mode network (the last five arguments: PARENT_HOST PARENT_PORT PARENT_RANK MY_HOST
 * MY_RANK; the secret from CONVERSE_TBON_SECRET_FILE) and answers the front-end of the
 * project's `tbon_attach` test program:
 *   SUM    "%d"                 -> on the same stream, its rank plus the value
 *   DOUBLE "%d"                 -> twice the value
 *   ECHO   "%s %ad %lf %uc"     -> on its singlecast stream: the string with "!" added, each
 *                                  item plus one, the double times two, the byte plus one
 *   LEAVE                       -> leaves the network (exit 0)
 * It prints "back RANK: shut down" when the network ends. With C_BACKEND_POLL set it polls
 * (Network_recv_nonblock and a 1 ms pause) instead of blocking in Network_recv.
 *
 * Build: cc c_backend.c -I../include -L<target dir> -lmrnet_lightweight
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mrnet_lightweight.h"

enum { SUM = 100, DOUBLE = 101, LEAVE = 102, ECHO = 103 };

int main(int argc, char **argv) {
    Network_t *net = Network_CreateNetworkBE(argc, argv);
    if (net == NULL) {
        return 2; /* it said why on stderr */
    }
    Rank me = Network_get_LocalRank(net);
    const Node_t *parent = NetworkTopology_find_Node(
        Network_get_NetworkTopology(net),
        NetworkTopology_Node_get_Parent(
            NetworkTopology_find_Node(Network_get_NetworkTopology(net), me)));
    printf("back %u: attached to %u\n", me, NetworkTopology_Node_get_Rank(parent));
    fflush(stdout);

    /* With C_BACKEND_POLL set, MRNet's polling loop: a non-blocking receive, then a pause. */
    int poll = getenv("C_BACKEND_POLL") != NULL;
    Packet_t *p = (Packet_t *)malloc(sizeof(Packet_t));
    Stream_t *stream = NULL;
    int tag = 0;
    for (;;) {
        int got = poll ? Network_recv_nonblock(net, &tag, p, &stream)
                       : Network_recv(net, &tag, p, &stream);
        if (got == 0) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
            continue;
        }
        if (got != 1) {
            if (Network_is_ShutDown(net)) {
                printf("back %u: shut down\n", me);
                break;
            }
            printf("back %u: %s\n", me, Network_last_error(net));
            free(p);
            delete_Network_t(net);
            return 1;
        }
        int v = 0, r = 0;
        switch (tag) {
        case SUM:
            r = Packet_unpack(p, "%d", &v) || Stream_send(stream, SUM, "%d", (int)me + v) ||
                Stream_flush(stream);
            break;
        case DOUBLE:
            r = Packet_unpack(p, "%d", &v) || Stream_send(stream, DOUBLE, "%d", 2 * v);
            break;
        case ECHO: {
            char *s = NULL;
            int *items = NULL;
            unsigned int n = 0;
            double d = 0;
            unsigned char c = 0;
            if (strcmp(Packet_get_FormatString(p), "%s %ad %lf %uc") != 0 ||
                Packet_unpack(p, "%s %ad %lf %uc", &s, &items, &n, &d, &c) != 0) {
                r = -1;
                break;
            }
            char out[256];
            snprintf(out, sizeof out, "%s!", s);
            for (unsigned int i = 0; i < n; i++) {
                items[i] += 1;
            }
            Stream_t *single = Network_get_Stream(net, me);
            r = single == NULL ||
                Stream_send(single, ECHO, "%s %ad %lf %uc", out, items, n, 2 * d, c + 1);
            free(s);
            free(items);
            break;
        }
        case LEAVE:
            printf("back %u: leaving\n", me);
            free(p);
            delete_Network_t(net);
            return 0;
        default:
            printf("back %u: tag %d?\n", me, tag);
            r = -1;
        }
        if (r != 0) {
            printf("back %u: %s\n", me, Network_last_error(net));
            free(p);
            delete_Network_t(net);
            return 1;
        }
        fflush(stdout);
    }
    fflush(stdout);
    free(p);
    delete_Network_t(net);
    return 0;
}
