/* The Tracker service's registry methods (RegisterPeer, Heartbeat, QueueStatus); see tracker.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ktune.pb-c.h"
#include "measure/measure.h"
#include "registry/registry.h"
#include "rpc/rpc.h"
#include "service/tracker.h"
#include "util/err.h"
#include "util/log.h"
#include "util/util.h"

int kt_tracker_register_desc(const Ktune__V1__RegisterRequest *req, kt_peer_desc_t *d)
{
    const Ktune__V1__PeerInfo *in = req->peer;
    if (!in)
        return kt_err_set(KT_EINVAL, "RegisterPeer: no peer");
    int role = kt_peer_role_from_name(in->role);
    if (role < 0)
        return kt_err_set(KT_EINVAL, "RegisterPeer: role must be runner or worker");
    if (in->n_targets > KT_REGISTRY_MAX_TARGETS)
        return kt_err_set(KT_EINVAL, "RegisterPeer: more than %d targets",
                          KT_REGISTRY_MAX_TARGETS);
    /* A target no job can have would leave the worker registered and idle. */
    for (size_t i = 0; role == KT_PEER_WORKER && i < in->n_targets; i++)
        if (kt_measure_target_parse(in->targets[i], NULL) != 0)
            return kt_err_prefix("RegisterPeer: targets[%zu]", i);
    if (in->capacity < 0)
        return kt_err_set(KT_EINVAL, "RegisterPeer: capacity %d (0 for the default of 1)",
                          in->capacity);
    *d = (kt_peer_desc_t){.peer_id = in->peer_id,
                          .role = (kt_peer_role_t)role,
                          .address = in->address,
                          .key = in->key,
                          .capacity = in->capacity,
                          .targets = (const char *const *)in->targets,
                          .n_targets = (int)in->n_targets,
                          .device = in->device};
    return 0;
}

static int h_register(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                      void *ud)
{
    kt_registry_service_t *svc = ud;
    const Ktune__V1__PeerInfo *in = ((const Ktune__V1__RegisterRequest *)req)->peer;
    kt_peer_desc_t d;
    if (kt_tracker_register_desc((const Ktune__V1__RegisterRequest *)req, &d) != 0)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "%s", kt_err_msg());
    int role = (int)d.role;
    char id[KT_REGISTRY_ID_MAX];
    int rc = kt_registry_register(svc->registry, &d, id);
    if (rc != 0)
        return rc;
    int again = in->peer_id && strcmp(in->peer_id, id) == 0;
    const char *dev = in->device && in->device->name && *in->device->name ? in->device->name
                                                                          : "unknown device";
    if (role == KT_PEER_RUNNER)
        KT_INFO("%s runner %s: key %s at %s (%s, capacity %d) from %s",
                again ? "re-registered" : "registered", id, in->key, in->address, dev,
                in->capacity > 0 ? in->capacity : 1, kt_rpc_call_peer(call));
    else
        KT_INFO("%s worker %s at %s (%zu target%s, %d parallel builds) from %s",
                again ? "re-registered" : "registered", id, in->address, in->n_targets,
                in->n_targets == 1 ? "" : "s", in->capacity > 0 ? in->capacity : 1,
                kt_rpc_call_peer(call));
    if (svc->registrations) {
        const char *labels[] = {kt_peer_role_name((kt_peer_role_t)role)};
        kt_metrics_add(svc->registrations, labels, 1);
    }
    Ktune__V1__RegisterResponse *out = (Ktune__V1__RegisterResponse *)resp;
    if (!(out->peer_id = kt_rpc_call_strdup(call, id)))
        return kt_err_set(KT_ENOMEM, "out of memory");
    out->heartbeat_interval_ms = kt_registry_heartbeat_ms(svc->registry);
    return KT_RPC_OK;
}

static int h_heartbeat(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                       void *ud)
{
    kt_registry_service_t *svc = ud;
    const Ktune__V1__HeartbeatRequest *in = (const Ktune__V1__HeartbeatRequest *)req;
    if (!in->peer_id || !*in->peer_id)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "Heartbeat: no peer id");
    if (in->in_flight < 0)
        return kt_rpc_call_fail(call, KT_RPC_INVALID_ARGUMENT, "Heartbeat: in_flight %d < 0",
                                in->in_flight);
    int rc = kt_registry_heartbeat(svc->registry, in->peer_id, in->in_flight);
    ((Ktune__V1__HeartbeatResponse *)resp)->known = rc == 0;
    if (rc == KT_ENOTFOUND)
        KT_INFO("heartbeat from unknown peer %s (%s); asking it to register again",
                in->peer_id, kt_rpc_call_peer(call));
    else if (rc != 0)
        return rc;
    return KT_RPC_OK;
}

/* A DeviceInfo copied into the call's memory (the snapshot is freed before
 * the reply is packed). */
static Ktune__V1__DeviceInfo *device_in_call(kt_rpc_call_t *call, const Ktune__V1__DeviceInfo *d)
{
    Ktune__V1__DeviceInfo *c = kt_rpc_call_alloc(call, sizeof *c);
    if (!c)
        return NULL;
    *c = *d;
    c->base.n_unknown_fields = 0;
    c->base.unknown_fields = NULL;
    c->target = kt_rpc_call_strdup(call, d->target ? d->target : "");
    c->name = kt_rpc_call_strdup(call, d->name ? d->name : "");
    c->arch = kt_rpc_call_strdup(call, d->arch ? d->arch : "");
    return c->target && c->name && c->arch ? c : NULL;
}

/* last_seen goes out as wall-clock seconds since the epoch, like every other
 * time in ktune.proto; the registry's clock is monotonic. */
static int fill_peer(kt_rpc_call_t *call, const kt_peer_t *p, double mono_now, double wall_now,
                     Ktune__V1__PeerInfo *o)
{
    ktune__v1__peer_info__init(o);
    o->peer_id = kt_rpc_call_strdup(call, p->id);
    o->role = (char *)kt_peer_role_name(p->role);   /* static; packing only reads it */
    o->address = kt_rpc_call_strdup(call, p->address);
    o->key = kt_rpc_call_strdup(call, p->key);
    o->state = (char *)p->state;
    o->capacity = p->capacity;
    o->in_flight = p->in_flight > p->leased ? p->in_flight : p->leased;
    o->last_seen = wall_now - (mono_now - p->last_seen);
    if (!o->peer_id || !o->address || !o->key)
        return KT_ENOMEM;
    if (p->device && !(o->device = device_in_call(call, p->device)))
        return KT_ENOMEM;
    if (p->n_targets) {
        o->targets = kt_rpc_call_alloc(call, (size_t)p->n_targets * sizeof *o->targets);
        if (!o->targets)
            return KT_ENOMEM;
        for (int i = 0; i < p->n_targets; i++)
            if (!(o->targets[i] = kt_rpc_call_strdup(call, p->targets[i])))
                return KT_ENOMEM;
        o->n_targets = (size_t)p->n_targets;
    }
    return 0;
}

static int h_queue_status(kt_rpc_call_t *call, const ProtobufCMessage *req,
                          ProtobufCMessage *resp, void *ud)
{
    (void)req;
    kt_registry_service_t *svc = ud;
    Ktune__V1__QueueStatusResponse *out = (Ktune__V1__QueueStatusResponse *)resp;
    kt_peer_t *peers = NULL;
    kt_queue_info_t *queues = NULL;
    int np = 0, nq = 0;
    int rc = kt_registry_peers(svc->registry, &peers, &np);
    if (rc == 0)
        rc = kt_registry_queues(svc->registry, &queues, &nq);
    double mono_now = kt_registry_now(svc->registry), wall_now = kt_time_wall();
    if (rc == 0 && np > 0) {
        Ktune__V1__PeerInfo *arr = kt_rpc_call_alloc(call, (size_t)np * sizeof *arr);
        out->peers = kt_rpc_call_alloc(call, (size_t)np * sizeof *out->peers);
        if (!arr || !out->peers)
            rc = KT_ENOMEM;
        for (int i = 0; rc == 0 && i < np; i++) {
            rc = fill_peer(call, &peers[i], mono_now, wall_now, &arr[i]);
            out->peers[i] = &arr[i];
        }
        if (rc == 0)
            out->n_peers = (size_t)np;
    }
    if (rc == 0 && nq > 0) {
        Ktune__V1__QueueInfo *arr = kt_rpc_call_alloc(call, (size_t)nq * sizeof *arr);
        out->queues = kt_rpc_call_alloc(call, (size_t)nq * sizeof *out->queues);
        if (!arr || !out->queues)
            rc = KT_ENOMEM;
        for (int i = 0; rc == 0 && i < nq; i++) {
            ktune__v1__queue_info__init(&arr[i]);
            if (!(arr[i].key = kt_rpc_call_strdup(call, queues[i].key)))
                rc = KT_ENOMEM;
            arr[i].total = queues[i].total;
            arr[i].free = queues[i].free;
            arr[i].pending = queues[i].pending;
            out->queues[i] = &arr[i];
        }
        if (rc == 0)
            out->n_queues = (size_t)nq;
    }
    kt_peer_list_free(peers, np);
    free(queues);
    if (rc == KT_ENOMEM)
        return kt_err_set(KT_ENOMEM, "QueueStatus: out of memory");
    return rc;
}

int kt_tracker_registry_service_add(kt_rpc_server_t *s, kt_registry_service_t *svc)
{
    int rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/RegisterPeer",
                                     &ktune__v1__register_request__descriptor,
                                     &ktune__v1__register_response__descriptor, h_register, svc);
    if (rc == 0)
        rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/Heartbeat",
                                     &ktune__v1__heartbeat_request__descriptor,
                                     &ktune__v1__heartbeat_response__descriptor, h_heartbeat,
                                     svc);
    if (rc == 0)
        rc = kt_rpc_server_add_unary(s, "/ktune.v1.Tracker/QueueStatus",
                                     &ktune__v1__queue_status_request__descriptor,
                                     &ktune__v1__queue_status_response__descriptor,
                                     h_queue_status, svc);
    return rc;
}
