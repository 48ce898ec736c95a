#version 450
// Vertex buffer input (position, colour) moved by push constants.
layout(location = 0) in vec2 pos;
layout(location = 1) in vec3 col;
layout(push_constant) uniform PC {
    vec2 offset;
    float scale;
} pc;
layout(location = 0) out vec3 vcol;
layout(location = 1) out vec2 uv;

void main()
{
    gl_Position = vec4(pos * pc.scale + pc.offset, 0.0, 1.0);
    vcol = col;
    uv = pos * 0.5 + 0.5;
}
