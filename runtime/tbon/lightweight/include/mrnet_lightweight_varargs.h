/* The variadic calls of the lightweight API, compiled into the program that includes
 * mrnet_lightweight.h (stable Rust cannot define a variadic function, and a C library linked
 * into a Rust cdylib would not export them): they read their arguments as the format string
 * says and hand them to the library as an array. Scalars come by value, with C's default promotions; an array comes as a
 * pointer followed by its length (unsigned int for `%a`, uint64_t for `%A`). Unpacking takes
 * a pointer per element; for an array, a pointer to the array pointer and then a pointer to
 * its length (unsigned int, or uint64_t for `%A`); strings and arrays are malloc'ed for the
 * caller to free. */

#ifndef MRNET_LIGHTWEIGHT_VARARGS_H
#define MRNET_LIGHTWEIGHT_VARARGS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "mrnet_lightweight.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most elements a format may have in a variadic call. */
#define MRNET_LIGHTWEIGHT_MAX_ELEMS 128

static inline int Stream_send_valist(Stream_t *stream, int tag, const char *format_string, va_list ap) {
    int codes[MRNET_LIGHTWEIGHT_MAX_ELEMS], arrays[MRNET_LIGHTWEIGHT_MAX_ELEMS];
    ctbon_value vals[MRNET_LIGHTWEIGHT_MAX_ELEMS];
    int n = ctbon_format(format_string, codes, arrays, MRNET_LIGHTWEIGHT_MAX_ELEMS);
    if (n < 0) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        ctbon_value *v = &vals[i];
        v->code = codes[i];
        v->array = arrays[i];
        v->len = 0;
        v->i = 0;
        v->u = 0;
        v->f = 0;
        v->p = NULL;
        if (arrays[i] != 0) {
            v->p = va_arg(ap, const void *);
            v->len = arrays[i] == 2 ? va_arg(ap, uint64_t) : va_arg(ap, unsigned int);
            continue;
        }
        switch (codes[i]) {
        case 0: case 2: case 4: v->i = va_arg(ap, int); break;
        case 1: case 3: v->u = (unsigned)va_arg(ap, int); break;
        case 5: v->u = va_arg(ap, unsigned int); break;
        case 6: v->i = va_arg(ap, int64_t); break;
        case 7: v->u = va_arg(ap, uint64_t); break;
        case 8: case 9: v->f = va_arg(ap, double); break;
        case 10: v->p = va_arg(ap, const char *); break;
        default: return -1;
        }
    }
    return ctbon_stream_send_values(stream, tag, format_string, vals, n);
}

static inline int Stream_send(Stream_t *stream, int tag, const char *format_string, ...) {
    va_list ap;
    va_start(ap, format_string);
    int r = Stream_send_valist(stream, tag, format_string, ap);
    va_end(ap);
    return r;
}

/* Free what an unpack that failed half-way allocated. */
static inline void mrnet_lightweight_free_values(ctbon_value *vals, int n) {
    for (int i = 0; i < n; i++) {
        if (vals[i].array != 0 && vals[i].code == 10) {
            char **items = (char **)vals[i].p;
            for (uint64_t k = 0; items != NULL && k < vals[i].len; k++) {
                free(items[k]);
            }
        }
        if (vals[i].array != 0 || vals[i].code == 10) {
            free((void *)vals[i].p);
        }
    }
}

static inline int Packet_unpack_valist(Packet_t *packet, va_list ap, const char *format_string) {
    ctbon_value vals[MRNET_LIGHTWEIGHT_MAX_ELEMS];
    int n = ctbon_packet_values(packet, format_string, vals, MRNET_LIGHTWEIGHT_MAX_ELEMS);
    if (n < 0) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        ctbon_value *v = &vals[i];
        void *dst = va_arg(ap, void *);
        if (dst == NULL) {
            mrnet_lightweight_free_values(vals + i, n - i);
            return -1;
        }
        if (v->array != 0) {
            *(const void **)dst = v->p;
            void *len = va_arg(ap, void *);
            if (len == NULL) {
                mrnet_lightweight_free_values(vals + i + 1, n - i - 1);
                return -1;
            }
            if (v->array == 2) {
                *(uint64_t *)len = v->len;
            } else {
                *(unsigned int *)len = (unsigned int)v->len;
            }
            continue;
        }
        switch (v->code) {
        case 0: *(signed char *)dst = (signed char)v->i; break;
        case 1: *(unsigned char *)dst = (unsigned char)v->u; break;
        case 2: *(short *)dst = (short)v->i; break;
        case 3: *(unsigned short *)dst = (unsigned short)v->u; break;
        case 4: *(int *)dst = (int)v->i; break;
        case 5: *(unsigned int *)dst = (unsigned int)v->u; break;
        case 6: *(int64_t *)dst = v->i; break;
        case 7: *(uint64_t *)dst = v->u; break;
        case 8: *(float *)dst = (float)v->f; break;
        case 9: *(double *)dst = v->f; break;
        case 10: *(const char **)dst = v->p; break;
        default: return -1;
        }
    }
    return 0;
}

static inline int Packet_unpack(Packet_t *packet, const char *format_string, ...) {
    va_list ap;
    va_start(ap, format_string);
    int r = Packet_unpack_valist(packet, ap, format_string);
    va_end(ap);
    return r;
}

#ifdef __cplusplus
}
#endif

#endif
