/*
 * Hardware parameters (hw_params.h) as JSON (records, CLI files) and as the
 * proto DeviceInfo a runner registers with (RPC). Kept apart from the plain
 * value so that the schedule state can use it without jansson or the
 * generated protobuf header.
 *
 * Thread-safe; the conversions borrow their arguments for the call.
 */
#ifndef KT_MEASURE_HW_PARAMS_JSON_H
#define KT_MEASURE_HW_PARAMS_JSON_H

#include <jansson.h>

#include "ktune.pb-c.h"
#include "measure/hw_params.h"

/* ---- JSON ---- */

/* An object with one member per field (cc_major/cc_minor are implied by
 * arch and not written). New reference; NULL with kt_err set when out of
 * memory or a string is not UTF-8. */
json_t *kt_hw_params_to_json(const kt_hw_params_t *hw);
/* Apply the members of `obj` to *hw (so *hw is the base for absent members:
 * zero it, or start from a preset) and validate; all or nothing. KT_EINVAL
 * naming the member for unknown members and wrong types. */
int kt_hw_params_from_json(const json_t *obj, kt_hw_params_t *hw);

/* ---- proto DeviceInfo ---- */

/* Fill `msg` (initialised here); its strings point into *hw, so hw must
 * outlive msg's use and msg must not be freed with the protobuf-c
 * free_unpacked. */
void kt_hw_params_to_proto(const kt_hw_params_t *hw, Ktune__V1__DeviceInfo *msg);
/* Read a DeviceInfo (e.g. one a runner registered with) and validate it.
 * KT_EINVAL when a string is too long or the values are inconsistent. */
int kt_hw_params_from_proto(const Ktune__V1__DeviceInfo *msg, kt_hw_params_t *hw);

#endif
