/* Status mapping and the helpers server.c and client.c share. */
#include "rpc_int.h"

#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/status.h>

#include "util/err.h"

/* The KT_RPC_* values are the wire codes; make sure they never drift. */
_Static_assert(KT_RPC_OK == GRPC_STATUS_OK, "code");
_Static_assert(KT_RPC_CANCELLED == GRPC_STATUS_CANCELLED, "code");
_Static_assert(KT_RPC_INVALID_ARGUMENT == GRPC_STATUS_INVALID_ARGUMENT, "code");
_Static_assert(KT_RPC_DEADLINE_EXCEEDED == GRPC_STATUS_DEADLINE_EXCEEDED, "code");
_Static_assert(KT_RPC_RESOURCE_EXHAUSTED == GRPC_STATUS_RESOURCE_EXHAUSTED, "code");
_Static_assert(KT_RPC_UNIMPLEMENTED == GRPC_STATUS_UNIMPLEMENTED, "code");
_Static_assert(KT_RPC_UNAVAILABLE == GRPC_STATUS_UNAVAILABLE, "code");
_Static_assert(KT_RPC_UNAUTHENTICATED == GRPC_STATUS_UNAUTHENTICATED, "code");

int kt_rpc_code_from_err(int kt_code)
{
    switch (kt_code) {
    case KT_OK: return KT_RPC_OK;
    case KT_EINVAL: return KT_RPC_INVALID_ARGUMENT;
    case KT_ENOMEM: return KT_RPC_RESOURCE_EXHAUSTED;
    case KT_EIO: return KT_RPC_INTERNAL;
    case KT_ENOTFOUND: return KT_RPC_NOT_FOUND;
    case KT_ETIMEOUT: return KT_RPC_DEADLINE_EXCEEDED;
    case KT_EUNAVAIL: return KT_RPC_UNAVAILABLE;
    case KT_EAUTH: return KT_RPC_UNAUTHENTICATED;
    case KT_ESTATE: return KT_RPC_FAILED_PRECONDITION;
    case KT_EINTERNAL: return KT_RPC_INTERNAL;
    case KT_EUNSUP: return KT_RPC_UNIMPLEMENTED;
    case KT_ELIMIT: return KT_RPC_RESOURCE_EXHAUSTED;
    case KT_EFULL: return KT_RPC_RESOURCE_EXHAUSTED;
    default: return KT_RPC_UNKNOWN;
    }
}

int kt_rpc_err_from_code(int rpc_code)
{
    switch (rpc_code) {
    case KT_RPC_OK: return KT_OK;
    case KT_RPC_INVALID_ARGUMENT:
    case KT_RPC_OUT_OF_RANGE: return KT_EINVAL;
    case KT_RPC_DEADLINE_EXCEEDED: return KT_ETIMEOUT;
    case KT_RPC_NOT_FOUND: return KT_ENOTFOUND;
    case KT_RPC_UNAVAILABLE: return KT_EUNAVAIL;
    case KT_RPC_UNAUTHENTICATED:
    case KT_RPC_PERMISSION_DENIED: return KT_EAUTH;
    case KT_RPC_ALREADY_EXISTS:
    case KT_RPC_FAILED_PRECONDITION:
    case KT_RPC_ABORTED: return KT_ESTATE;
    case KT_RPC_RESOURCE_EXHAUSTED: return KT_ELIMIT;
    case KT_RPC_UNIMPLEMENTED: return KT_EUNSUP;
    case KT_RPC_CANCELLED: return KT_EIO;
    default: return KT_EINTERNAL;
    }
}

const char *kt_rpc_code_name(int rpc_code)
{
    static const char *names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    if (rpc_code < 0 || rpc_code >= (int)(sizeof names / sizeof names[0]))
        return "UNKNOWN_CODE";
    return names[rpc_code];
}

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void lib_init(void) { grpc_init(); }

void kt_rpc_lib_init(void) { pthread_once(&lib_once, lib_init); }

grpc_byte_buffer *kt_rpc_bb_pack(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(len);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    if (!bb)
        kt_err_set(KT_ENOMEM, "out of memory packing %s", msg->descriptor->name);
    return bb;
}

grpc_byte_buffer *kt_rpc_bb_copy(const void *data, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer(data ? data : "", data ? len : 0);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    if (!bb)
        kt_err_set(KT_ENOMEM, "out of memory");
    return bb;
}

grpc_slice kt_rpc_bb_slice(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

ProtobufCMessage *kt_rpc_bb_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb)
{
    grpc_slice s = kt_rpc_bb_slice(bb);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

gpr_timespec kt_rpc_deadline(int ms)
{
    if (ms < 0)
        ms = 0;
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

void kt_rpc_slice_copy(grpc_slice s, char *buf, size_t size)
{
    size_t n = GRPC_SLICE_LENGTH(s);
    if (n >= size)
        n = size - 1;
    memcpy(buf, GRPC_SLICE_START_PTR(s), n);
    buf[n] = '\0';
}

void kt_rpc_size_args(grpc_arg *args, size_t max_message)
{
    int lim = max_message > (size_t)INT_MAX ? INT_MAX : (int)max_message;
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = lim;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = lim;
}
