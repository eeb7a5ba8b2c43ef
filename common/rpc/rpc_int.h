/*
 * Internal to common/rpc: the pieces server.c and client.c share (message
 * packing into gRPC byte buffers, deadlines, library init). Not installed.
 */
#ifndef KT_RPC_RPC_INT_H
#define KT_RPC_RPC_INT_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "rpc.h"

#define KT_RPC_HIDDEN __attribute__((visibility("hidden")))

/* Initialise gRPC once per process (see rpc.h on why it is never shut down). */
KT_RPC_HIDDEN void kt_rpc_lib_init(void);

/* Pack a message (or copy raw bytes) into a new byte buffer; NULL and kt_err
 * set when out of memory. Caller destroys with grpc_byte_buffer_destroy. */
KT_RPC_HIDDEN grpc_byte_buffer *kt_rpc_bb_pack(const ProtobufCMessage *msg);
KT_RPC_HIDDEN grpc_byte_buffer *kt_rpc_bb_copy(const void *data, size_t len);

/* The whole content of a received byte buffer as one slice (caller unrefs). */
KT_RPC_HIDDEN grpc_slice kt_rpc_bb_slice(grpc_byte_buffer *bb);

/* Unpack a received byte buffer; NULL when the bytes do not decode. */
KT_RPC_HIDDEN ProtobufCMessage *kt_rpc_bb_unpack(const ProtobufCMessageDescriptor *desc,
                                                 grpc_byte_buffer *bb);

/* Monotonic deadline `ms` from now (never earlier than now). */
KT_RPC_HIDDEN gpr_timespec kt_rpc_deadline(int ms);

/* Copy a slice into a NUL-terminated fixed buffer (truncating). */
KT_RPC_HIDDEN void kt_rpc_slice_copy(grpc_slice s, char *buf, size_t size);

/* Channel/server args for a message size limit: fills `args` (2 entries). */
KT_RPC_HIDDEN void kt_rpc_size_args(grpc_arg *args, size_t max_message);

#endif
