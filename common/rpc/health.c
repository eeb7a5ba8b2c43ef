/* The Health method every ktune daemon serves. */
#include "rpc.h"

#include <stdio.h>

#include "kt_config.h"
#include "ktune.pb-c.h"
#include "util/err.h"

static int health(kt_rpc_call_t *call, const ProtobufCMessage *req, ProtobufCMessage *resp,
                  void *ud)
{
    (void)call;
    (void)req;
    Ktune__V1__HealthResponse *r = (Ktune__V1__HealthResponse *)resp;
    /* Packing only reads these, so pointing at constant strings is safe. */
    r->status = (char *)"SERVING";
    r->version = (char *)KT_VERSION;
    r->role = ud;
    return KT_RPC_OK;
}

int kt_rpc_server_add_health(kt_rpc_server_t *s, const char *service, const char *role)
{
    if (!service || !role)
        return kt_err_set(KT_EINVAL, "health: service and role are required");
    char method[256];
    int n = snprintf(method, sizeof method, "/ktune.v1.%s/Health", service);
    if (n < 0 || (size_t)n >= sizeof method)
        return kt_err_set(KT_EINVAL, "health: service name too long");
    return kt_rpc_server_add_unary(s, method, &ktune__v1__health_request__descriptor,
                                   &ktune__v1__health_response__descriptor, health, (void *)role);
}
