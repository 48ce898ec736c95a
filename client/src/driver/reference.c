/* reference.c - the reference compiler (planner.c, codegen.c) as a driver (driver/driver.h). */
#include "driver/driver.h"

const psdb__driver psdb__reference_driver = {
    .name = "reference",
    .plan_compute = psdb__plan_compute,
    .plan_graphics = psdb__plan_graphics,
    .plan_state_object = psdb__plan_state_object_ex,
    .plan_encoded = psdb__plan_encoded,
    .compile_unit = psdb__compile_unit,
};
