/* Every Tracker request as the tracker decodes and validates it, without
 * sockets: the first byte picks the method, the rest is its message.
 * SubmitJob runs kt_jobs_check_job (options, tasks, workload JSON),
 * RegisterPeer kt_tracker_register_desc and the registry's own checks on a
 * fresh registry, Heartbeat the registry's lookup; the others are decoded
 * (their handlers only look an id up in the store). */
#include "fuzz_common.h"
#include "ktune.pb-c.h"
#include "registry/registry.h"
#include "service/jobs.h"
#include "service/tracker.h"

static const ProtobufCMessageDescriptor *const methods[] = {
    &ktune__v1__health_request__descriptor,      &ktune__v1__register_request__descriptor,
    &ktune__v1__heartbeat_request__descriptor,   &ktune__v1__queue_status_request__descriptor,
    &ktune__v1__submit_job_request__descriptor,  &ktune__v1__job_ref__descriptor,
    &ktune__v1__list_jobs_request__descriptor,   &ktune__v1__query_best_request__descriptor,
    &ktune__v1__list_records_request__descriptor};
#define N_METHODS (sizeof methods / sizeof methods[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_fuzz_quiet();
    if (size < 1)
        return 0;
    const ProtobufCMessageDescriptor *d = methods[data[0] % N_METHODS];
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
    if (!m)
        return 0;
    if (d == &ktune__v1__submit_job_request__descriptor) {
        kt_jobs_check_job(((Ktune__V1__SubmitJobRequest *)m)->job, NULL, NULL);
    } else if (d == &ktune__v1__register_request__descriptor ||
               d == &ktune__v1__heartbeat_request__descriptor) {
        kt_registry_opts_t ro = {0};
        kt_registry_t *r = kt_registry_new(&ro);
        kt_peer_desc_t desc;
        char id[KT_REGISTRY_ID_MAX];
        if (r && d == &ktune__v1__register_request__descriptor &&
            kt_tracker_register_desc((Ktune__V1__RegisterRequest *)m, &desc) == 0 &&
            kt_registry_register(r, &desc, id) == 0)
            kt_registry_heartbeat(r, id, 1);
        if (r && d == &ktune__v1__heartbeat_request__descriptor) {
            const Ktune__V1__HeartbeatRequest *h = (const Ktune__V1__HeartbeatRequest *)m;
            kt_registry_heartbeat(r, h->peer_id ? h->peer_id : "", h->in_flight);
        }
        kt_registry_free(r);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
