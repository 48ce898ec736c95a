#version 450
// A compute shader whose work depends on a specialization constant (MODE) and push constants.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int MODE = 0;
layout(push_constant) uniform PC {
    uint seed;
    uint count;
} pc;
layout(std430, set = 0, binding = 0) buffer Out {
    uint data[];
} o;

void main()
{
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count)
        return;
    uint x = (i * 2654435761u) ^ pc.seed;
    for (int k = 0; k < 4 + MODE * 4; k++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
    }
    if (MODE == 2)
        x = x % 1000u;
    o.data[i] = x;
}
