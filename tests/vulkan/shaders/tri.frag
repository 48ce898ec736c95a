#version 450
// Variants: TEXTURED (a define) samples through the immutable sampler; GAIN is a specialization
// constant.
layout(constant_id = 0) const float GAIN = 1.0;
layout(set = 0, binding = 0) uniform sampler2D tex;
layout(location = 0) in vec3 vcol;
layout(location = 1) in vec2 uv;
layout(location = 0) out vec4 o;

void main()
{
#ifdef TEXTURED
    o = vec4(vcol * texture(tex, uv).rgb * GAIN, 0.75);
#else
    o = vec4(vcol * GAIN, 0.75);
#endif
}
